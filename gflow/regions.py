"""Region tracker: which activation region each hidden neuron occupies over time.

A neuron's *pattern* is the mode of its pre-activation on every data point
(``"+"`` active, ``"-"`` inactive, ``"0"`` sliding on the surface). Patterns change only
at recorded events, so the tracker rebuilds them exactly from a solution's initial
modes and its crossings.

For the paper's two-point setting (``n = 2``, first layer) patterns carry the names of
SPEC §4: ``D`` (inactive on both points), ``S`` (active on both), ``S1`` (active on
``x_1`` only), ``S2`` (active on ``x_2`` only). A neuron sliding on a boundary is named by
the cones it separates, e.g. ``"S1|S"`` while it slides on ``w·x_2 = 0`` with
``w·x_1 > 0``.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools

import numpy as np

from .events import ACTIVE, INACTIVE, SLIDING, Kind

__all__ = ["Interval", "NeuronRegions", "mode_gaps", "modes_at", "neuron_regions", "two_point_name", "unit_gaps"]

_SYMBOL = {INACTIVE: "-", ACTIVE: "+", SLIDING: "0"}
_CONES = {("+", "+"): "S", ("+", "-"): "S1", ("-", "+"): "S2", ("-", "-"): "D"}
_CONE_ORDER = ("D", "S", "S1", "S2")


def two_point_name(pattern: str) -> str:
    """Name of a two-point first-layer pattern (``"+-"`` → ``"S1"``, ``"+0"`` → ``"S1|S"``)."""
    if pattern == "00":
        return "origin"  # on both surfaces: w ⊥ x_1, x_2, so w = 0 in the plane
    options = [("+", "-") if c == "0" else (c,) for c in pattern]
    names = {_CONES[combo] for combo in itertools.product(*options)}
    return (
        "|".join(sorted(names, key=lambda s: (s not in ("S1", "S2"), _CONE_ORDER.index(s))))
        if len(names) > 1
        else names.pop()
    )


@dataclasses.dataclass(frozen=True)
class Interval:
    """``[t_start, t_end)`` during which a neuron keeps one activation pattern."""

    t_start: float
    t_end: float
    pattern: str
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name if self.name is not None else self.pattern


@dataclasses.dataclass(frozen=True)
class NeuronRegions:
    """The intervals of one neuron; ``at(t)`` gives the interval in force at time ``t``."""

    layer: int
    neuron: int
    intervals: tuple

    def at(self, t: float) -> Interval:
        starts = [iv.t_start for iv in self.intervals]
        return self.intervals[max(bisect.bisect_right(starts, t) - 1, 0)]

    def sequence(self) -> list[str]:
        """Labels in the order visited, e.g. ``["S", "S1|S", "S1"]``."""
        return [iv.label for iv in self.intervals]


def _apply(mode, kind, direction):
    if kind == Kind.SLIDE_START:
        return SLIDING
    if kind in (Kind.CROSS, Kind.SLIDE_END):
        return ACTIVE if direction > 0 else INACTIVE
    if kind == Kind.CUT:
        return INACTIVE
    return mode


def _require_single(solution):
    if np.ndim(solution.t) != 0:
        raise ValueError("solution: expected a single-trajectory solution; index a batch solution first (sol[b])")


def modes_at(solution, t) -> np.ndarray:
    """The mode of every pre-activation at time ``t``, rebuilt from a solution's initial
    modes and its recorded events (those at times ``≤ t``: at an event's own time, the
    modes it leaves). With ``t`` one of the save times, these are the modes that go with
    ``ys`` there: ``simulate(ys_k, X, Y, modes=solution.modes_at(ts[k]), ...)`` continues
    the run from ``ts[k]`` as it went on, where the signs of ``p`` alone cannot tell a unit
    sliding on its surface, or dead on it, from one on either side.

    Arguments:
        solution: a single-trajectory :class:`gflow.Solution` (index a batch first).
        t: a time in ``[0, solution.t]``, or a 1-D array of them.

    Returns:
        ``(P,)`` ints (0 inactive, 1 active, 2 sliding; flat order of
        :mod:`gflow.networks`), or ``(len(t), P)`` for an array of times. ``modes_at(solution.t)``
        is ``solution.final_modes``.
    """
    _require_single(solution)
    times = np.asarray(t, dtype=np.float64)
    t_final = float(solution.t)
    if times.ndim > 1 or not np.all((times >= 0.0) & (times <= t_final)):  # NaN fails too
        raise ValueError(
            f"t: expected a time or a 1-D array of times in [0, {t_final!r}] (the solution's t), got {t!r}"
        )
    n, widths, cr = solution.n, solution.hidden_widths, solution.crossings
    offsets = n * np.concatenate([[0], np.cumsum(widths)])
    flat = offsets[np.asarray(cr.layer, dtype=np.int64)] + np.asarray(cr.neuron) * n + np.asarray(cr.point)
    out = []
    for time in np.atleast_1d(times):
        modes = np.asarray(solution.initial_modes).copy()
        for e in range(int(cr.count)):
            if cr.t[e] > time:
                break
            modes[flat[e]] = _apply(modes[flat[e]], cr.kind[e], cr.direction[e])
        out.append(modes)
    return out[0] if times.ndim == 0 else np.stack(out)


def unit_gaps(modes, params, X) -> np.ndarray:
    """How far each pre-activation is from where its mode puts it: ``max(0, −p)`` for an
    active unit, ``max(0, p)`` for an inactive one, ``|p|`` for one sliding on its surface,
    with ``p`` computed in NumPy (:func:`gflow.reference.preactivations`).

    An exact trajectory keeps every gap at round-off (its events are located to the
    solver's tolerance): a larger gap means the modes no longer describe the weights,
    e.g. a sliding unit whose control did not hold it on its surface.

    Arguments:
        modes: ``(P,)`` modes (0 inactive, 1 active, 2 sliding; flat order of
            :mod:`gflow.networks`).
        params: ``[W_1, ..., W_k]`` of one network.
        X: inputs ``(n, d_in)``.

    Returns:
        ``(P,)`` float64 gaps, in the units of ``p``.
    """
    from .reference import preactivations

    p = np.concatenate([z.ravel() for z in preactivations(params, X)])
    mode = np.asarray(modes)
    if mode.shape != p.shape or not np.all(np.isin(mode, (INACTIVE, ACTIVE, SLIDING))):
        raise ValueError(
            f"modes: expected {p.size} modes in {{0, 1, 2}} (one per pre-activation of params on X), "
            f"got shape {mode.shape} with values {np.unique(mode).tolist()}"
        )
    return np.where(mode == ACTIVE, np.maximum(-p, 0.0), np.where(mode == INACTIVE, np.maximum(p, 0.0), np.abs(p)))


def mode_gaps(solution, X, t=None) -> np.ndarray:
    """:func:`unit_gaps` of a solution's weights and modes, at the end or at one of its
    save times: a check, after the fact, that the modes the engine integrated with still
    describe the weights (``mode_gaps(sol, X).max()`` at round-off).

    Arguments:
        solution: a single-trajectory :class:`gflow.Solution` (index a batch first).
        X: the inputs the solution was run on, ``(n, d_in)``.
        t: ``None`` (the end) or one of ``solution.ts`` (the weights saved there and
            :func:`modes_at` that time).

    Returns:
        ``(P,)`` float64 gaps.
    """
    _require_single(solution)
    if t is None:
        return unit_gaps(solution.final_modes, solution.params, X)
    hits = np.flatnonzero(np.asarray(solution.ts) == t)
    if hits.size == 0 or float(t) > float(solution.t):
        raise ValueError(f"t: expected None or one of the solution's save times up to {float(solution.t)!r}, got {t!r}")
    k = int(hits[0])
    return unit_gaps(modes_at(solution, t), [np.asarray(W)[k] for W in solution.ys], X)


def neuron_regions(solution, layer: int = 0) -> list[NeuronRegions]:
    """Activation-pattern intervals of every neuron of hidden ``layer`` (0-based).

    Arguments:
        solution: a single-trajectory :class:`gflow.Solution` (index a batch first).
        layer: hidden layer index, ``0 ≤ layer < k − 1``.

    Returns:
        One :class:`NeuronRegions` per neuron of the layer, intervals covering
        ``[0, solution.t]``. Names follow SPEC §4 when ``n = 2`` and ``layer = 0``.
    """
    _require_single(solution)
    widths = solution.hidden_widths
    if not 0 <= layer < len(widths):
        raise ValueError(f"layer: expected a hidden layer index in [0, {len(widths)}), got {layer!r}")
    n = solution.n
    offset = n * sum(widths[:layer])
    d = widths[layer]
    modes = np.asarray(solution.initial_modes)[offset : offset + d * n].reshape(d, n).copy()
    named = n == 2 and layer == 0
    cr = solution.crossings
    t_final = float(solution.t)
    out = []
    for j in range(d):
        rows = [e for e in range(int(cr.count)) if cr.layer[e] == layer and cr.neuron[e] == j]
        intervals, start, current = [], 0.0, modes[j].copy()
        for t, group in itertools.groupby(rows, key=lambda e: float(cr.t[e])):
            new = current.copy()
            for e in group:
                new[cr.point[e]] = _apply(new[cr.point[e]], cr.kind[e], cr.direction[e])
            if np.array_equal(new, current):
                continue
            intervals.append(_interval(start, t, current, named))
            start, current = t, new
        intervals.append(_interval(start, t_final, current, named))
        out.append(NeuronRegions(layer, j, tuple(intervals)))
    return out


def _interval(t0, t1, modes, named):
    pattern = "".join(_SYMBOL[int(m)] for m in modes)
    return Interval(t0, t1, pattern, two_point_name(pattern) if named else None)
