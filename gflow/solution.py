"""What :func:`gflow.simulate` returns: result codes, crossings, the solution object."""

from __future__ import annotations

import enum

import equinox as eqx
import numpy as np

from .events import Kind

__all__ = ["Status", "Crossings", "Solution"]


class Status(enum.IntEnum):
    """Why a trajectory stopped. ``Status.X.message`` explains it."""

    RUNNING = 0
    REACHED_T1 = 1
    CONVERGED = 2
    LOSS_BELOW = 3
    MAX_STEPS = 4
    MAX_EVENTS = 5
    NONFINITE = 6
    STEP_SIZE = 7
    SLIDING_LIMIT = 8
    DIRECTION_SETTLED = 9
    KINK_UNRESOLVED = 10

    @property
    def message(self) -> str:
        return _MESSAGES[self]

    @property
    def success(self) -> bool:
        return self in (Status.REACHED_T1, Status.CONVERGED, Status.LOSS_BELOW, Status.DIRECTION_SETTLED)


_MESSAGES = {
    Status.RUNNING: "still running (internal state; never returned)",
    Status.REACHED_T1: "reached the final time t1",
    Status.CONVERGED: "steady state: the gradient norm fell below gtol",
    Status.LOSS_BELOW: "steady state: the loss fell below ltol",
    Status.MAX_STEPS: "stopped at the step budget max_steps before t1",
    Status.MAX_EVENTS: "stopped at the event budget max_events before t1",
    Status.NONFINITE: "the state or the field became non-finite (inf/NaN); the last finite state is kept",
    Status.STEP_SIZE: "the step size collapsed to round-off (no progress in t)",
    Status.SLIDING_LIMIT: "more units slide, or sit on their surfaces at one kink, than max_sliding allows; raise max_sliding",
    Status.DIRECTION_SETTLED: "the direction θ/‖θ‖ has settled: tan ∠(θ, dθ/dt) fell below dtol",
    Status.KINK_UNRESOLVED: (
        "at a kink no decision of the units on their surfaces (which slide, which leave to which side) "
        "satisfied its conditions to tolerance (gflow.sliding.complementarity); the state there is kept"
    ),
}


class Crossings(eqx.Module):
    """Recorded events, one entry per event, in time order.

    For one trajectory the arrays have shape ``(count,)``. For a batch they have shape
    ``(B, max_events)``, padded with ``t = NaN`` and ``-1`` entries, and ``count`` has
    shape ``(B,)``.

    Fields:
        t: time of the event.
        layer, neuron, point: the pre-activation (see :mod:`gflow.networks`).
        direction: +1 the unit becomes active, -1 it becomes inactive, 0 neither
            (slide start, touch, repel).
        kind: a :class:`gflow.Kind` code (cross, slide start, slide end, touch, repel,
            cut).
        count: number of events.
    """

    t: np.ndarray
    layer: np.ndarray
    neuron: np.ndarray
    point: np.ndarray
    direction: np.ndarray
    kind: np.ndarray
    count: np.ndarray

    def __len__(self):
        return int(np.sum(self.count)) if np.ndim(self.count) == 0 else int(np.asarray(self.count).shape[0])

    def rows(self):
        """The events of a single trajectory as a list of dicts (readable printing)."""
        if np.ndim(self.count) != 0:
            raise ValueError("rows(): expected the crossings of one trajectory; index a batch solution first")
        return [
            dict(
                t=float(self.t[e]),
                layer=int(self.layer[e]),
                neuron=int(self.neuron[e]),
                point=int(self.point[e]),
                direction=int(self.direction[e]),
                kind=Kind(int(self.kind[e])).name.lower(),
            )
            for e in range(int(self.count))
        ]


class Solution(eqx.Module):
    """The result of :func:`gflow.simulate` (one trajectory) or
    :func:`gflow.simulate_batch` (every field with a leading batch axis).

    Fields:
        params: final parameters, same structure as the input.
        t: final time.
        loss: final loss (weight decay term included).
        grad_norm: final ‖∇L‖ (the Filippov field where units slide).
        status: :class:`Status` for one trajectory; int codes ``(B,)`` for a batch.
        crossings: :class:`Crossings`.
        ts: requested save times ``(S,)`` (empty if none).
        ys: parameters at ``ts`` (leading axis ``S`` on every matrix; NaN for save times
            after an early stop).
        initial_modes, final_modes: mode of every pre-activation (0 inactive, 1 active,
            2 sliding), flat index order of :mod:`gflow.networks`, ``(P,)``; at any time
            in between: :meth:`modes_at`.
        stats: dict of solver statistics: ``num_accepted``, ``num_rejected``,
            ``num_events``, ``num_iterations``, ``tolerance_factor`` (the factor on
            ``rtol`` and ``atol`` at the end: ``motion_tol`` of :func:`gflow.simulate`),
            ``surface_jump`` (deep networks: the loss change of the moves that put
            sliding units back on their surfaces, :func:`gflow.kinks.onto_surfaces`,
            summed; 0 where none was made: see :attr:`energy_defect`).
        initial_loss: the loss at ``t = 0`` (weight decay term included).
        energy: ``E(t) = ∫₀ᵗ ‖θ̇(s)‖² ds``, integrated alongside the flow (one more
            state entry, outside the step-size control). The exact flow has
            ``L(θ(0)) − L(θ(t)) = E(t)`` with or without sliding: see
            :attr:`energy_defect`.
        saved_energy: ``E`` at the save times ``ts`` (NaN after an early stop).
        n, hidden_widths: data size and hidden widths (to decode flat indices).
    """

    params: list
    t: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    status: object
    crossings: Crossings
    ts: np.ndarray
    ys: list
    initial_modes: np.ndarray
    final_modes: np.ndarray
    stats: dict
    initial_loss: np.ndarray
    energy: np.ndarray
    saved_energy: np.ndarray
    n: int = eqx.field(static=True)
    hidden_widths: tuple = eqx.field(static=True)

    @property
    def energy_defect(self):
        """The energy identity's relative defect, ``|L(0) − L(t) − E(t)|`` over the loss
        the flow has dissipated (``max(E, |L(0) − L(t)|)``, at least 1e-14·|L(0)| so that a
        trajectory that barely moves is not judged by round-off). For an exact flow it
        shrinks with the tolerances, which bound errors relative to the weights' size: a
        run that dissipates little (a warm start) shows more at the same tolerance (see
        *Choosing tolerances*); a value that does not shrink means the integrated velocity
        was not the gradient of the loss that fell (e.g. a sliding unit off its surface).
        The moves that put sliding units back on their surfaces change the loss by
        ``stats["surface_jump"]`` outside the flow, and the defect includes them:
        ``L(0) − L(t) + surface_jump − E(t)`` is what the integration left.
        One value, or ``(B,)`` for a batch."""
        drop = np.asarray(self.initial_loss) - np.asarray(self.loss)
        scale = np.maximum(np.maximum(np.abs(drop), np.abs(self.energy)), 1e-14 * np.abs(self.initial_loss))
        return np.abs(drop - self.energy) / np.maximum(scale, np.finfo(np.float64).tiny)

    @property
    def message(self) -> str:
        if isinstance(self.status, Status):
            return self.status.message
        return "; ".join(f"{Status(int(s)).name}: {int(np.sum(self.status == s))}" for s in np.unique(self.status))

    def __getitem__(self, b: int) -> Solution:
        """Member ``b`` of a batch solution, as a single-trajectory solution."""
        if isinstance(self.status, Status):
            raise TypeError("indexing: this is already a single-trajectory solution")
        count = int(self.crossings.count[b])
        cr = Crossings(
            t=self.crossings.t[b, :count],
            layer=self.crossings.layer[b, :count],
            neuron=self.crossings.neuron[b, :count],
            point=self.crossings.point[b, :count],
            direction=self.crossings.direction[b, :count],
            kind=self.crossings.kind[b, :count],
            count=np.int64(count),
        )
        return Solution(
            params=[W[b] for W in self.params],
            t=self.t[b],
            loss=self.loss[b],
            grad_norm=self.grad_norm[b],
            status=Status(int(self.status[b])),
            crossings=cr,
            ts=self.ts,
            ys=[W[b] for W in self.ys],
            initial_modes=self.initial_modes[b],
            final_modes=self.final_modes[b],
            stats={k: v[b] for k, v in self.stats.items()},
            initial_loss=self.initial_loss[b],
            energy=self.energy[b],
            saved_energy=self.saved_energy[b],
            n=self.n,
            hidden_widths=self.hidden_widths,
        )

    def __len__(self):
        if isinstance(self.status, Status):
            raise TypeError("len(): a single-trajectory solution has no batch axis")
        return len(self.status)

    def modes_at(self, t):
        """Every pre-activation's mode at time ``t`` (or at each of an array of times),
        e.g. to continue a run from a saved state; see :func:`gflow.regions.modes_at`."""
        from .regions import modes_at

        return modes_at(self, t)

    def mode_gaps(self, X, t=None):
        """How far each pre-activation is from the side or surface its mode puts it on, at
        the end or at a save time ``t``; see :func:`gflow.regions.mode_gaps`."""
        from .regions import mode_gaps

        return mode_gaps(self, X, t)

    def regions(self, layer: int = 0):
        """Activation-pattern intervals of every neuron of a hidden layer; see
        :func:`gflow.regions.neuron_regions`."""
        from .regions import neuron_regions

        return neuron_regions(self, layer)
