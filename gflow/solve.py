"""Public entry points: :func:`simulate` (one trajectory) and :func:`simulate_batch`."""

from __future__ import annotations

import functools
import math

import jax
import numpy as np

from .flow import _HELD_BAND, _IMPLICIT, _SOLVERS, Config, _noise, compiled, ravel
from .losses import CLASSIFICATION, LOSSES
from .networks import index_table, preactivations
from .solution import Crossings, Solution, Status

__all__ = ["simulate", "simulate_batch"]


def simulate(
    params,
    X,
    Y,
    *,
    loss="square",
    t1,
    rtol=1e-8,
    atol=1e-10,
    weight_decay=0.0,
    saveat=None,
    gtol=None,
    ltol=None,
    dtol=None,
    solver="dopri8",
    max_steps=100_000,
    max_events=None,
    max_sliding=None,
    event_samples=8,
    pcoeff=0.2,
    icoeff=0.4,
    events="stop",
    modes=None,
    motion_tol=None,
    throw=True,
) -> Solution:
    """Integrate the gradient flow ``dθ/dt = −∇L(θ)`` of a bias-free ReLU network exactly.

    Between kinks a Diffrax Runge–Kutta solver (``solver``) under a PID step controller
    integrates the smooth field of the current activation region to ``rtol``/``atol``.
    Every zero crossing of a hidden pre-activation is located by root finding, recorded,
    and resolved from the one-sided fields (transversal crossing, Filippov sliding,
    touch); see :mod:`gflow.events` and :mod:`gflow.flow`.

    Arguments:
        params: ``[W_1, ..., W_k]`` (``k ≥ 2``), ``W_l`` of shape ``(d_l, d_{l-1})``.
        X: inputs, shape ``(n, d_0)``.
        Y: targets, shape ``(n, d_k)``; for ``loss="exponential"``/``"logistic"``, ``±1``
            labels of shape ``(n,)`` (or ``(n, 1)``) with ``d_k = 1``.
        loss: ``"square"`` (``½Σ‖N(x_i) − y_i‖²``), ``"mse"``, ``"exponential"``,
            ``"logistic"``.
        t1: final time (> 0; ``inf`` allowed with ``gtol``, ``ltol`` or ``dtol``).
        rtol, atol: tolerances of the step controller.
        weight_decay: ``λ ≥ 0``; the flow is that of ``L + (λ/2)‖θ‖²``.
        saveat: optional increasing times in ``[0, t1]`` at which to save parameters.
        gtol: stop (status ``CONVERGED``) once ``‖∇L‖ < gtol`` after a step.
        ltol: stop (status ``LOSS_BELOW``) once the loss is below ``ltol``.
        dtol: stop (status ``DIRECTION_SETTLED``) once the direction ``θ/‖θ‖`` moves
            by less than ``dtol`` per unit of ``log‖θ‖``: ``tan ∠(θ, θ̇) < dtol`` (the
            velocity's component across ``θ`` over its component along ``θ``; never
            while ``‖θ‖`` shrinks). For exponential and logistic losses, whose weights
            grow like ``log t`` while the direction converges and aligns with ``−∇L``
            (SPEC §5).
        solver: ``"dopri8"`` (default), ``"dopri5"`` or ``"tsit5"`` (explicit Diffrax
            Runge–Kutta solvers), or ``"kvaerno5"`` (implicit, L-stable; its chord
            iterations stop at ``rtol``/``atol``). Use the implicit one for stiff flows,
            such as the approach to a stationary point under weight decay, where an
            explicit solver's step is capped by stability at ~``1/‖∇²L‖`` while the flow
            needs time ~``1/λ``. Its dense output is a cubic Hermite interpolant, so kinks
            inside a step are located on a lower-order interpolant than with ``dopri8``.
        max_steps: iteration budget (steps, rejected steps and events).
        max_events: event budget (default ``64 + 16·P``, ``P`` = number of pre-activations).
        max_sliding: most units that may slide at once (default ``min(P, 8)``).
        event_samples: guards are checked at this many points of each step's dense
            interpolant (the end included), so a pre-activation that dips below zero and
            comes back inside one step is still caught unless both crossings fall
            between two samples.
        pcoeff, icoeff: PID coefficients.
        events: ``"stop"`` (default): stop at every kink and resolve it exactly.
            ``"through"``: integrate through kinks with the plain ReLU gradient
            (``σ'(0) = 0``; a first-layer neuron inactive at every point stays so, as
            in exact flow) and let the step controller absorb them; crossings are still
            recorded (kind ``CROSS``), located by linear interpolation between
            ``event_samples`` points of each step's dense solution. Cheaper for large
            networks, but no Filippov sliding (a unit that should slide chatters around
            its surface at the tolerance scale, every chatter recorded) and the error
            at each kink is the controller's, not the root finder's; see
            ``benchmarks/through.py`` for what it costs in accuracy. The event budget
            does not stop this mode: ``crossings`` keeps the first ``max_events``,
            ``stats["num_events"]`` counts all.
        modes: the starting mode of every pre-activation (``(P,)`` ints, 0 inactive, 1
            active, 2 sliding, flat order of :mod:`gflow.networks`), to continue a run
            from where it stopped: pass its ``final_modes`` with its ``params`` (from a
            saved state ``ys`` at ``ts[k]``: :meth:`Solution.modes_at` ``(ts[k])``). ``-1``
            (the default for every unit): by the sign of its pre-activation, a unit at
            exactly ``p = 0`` decided by its one-sided rates. The signs cannot tell what a
            run knew: a neuron that died on its surface is frozen at ``p`` within the
            tolerance of 0, possibly on the active side, and a new call from that state
            would revive it where a continuation keeps it dead. Each given mode must
            agree with its ``p`` up to the round-off band ``10·(atol + rtol·max(1,
            max|p|))`` inside which no event fires (sliding: ``|p|`` within it). A given
            sliding unit whose control in this call's field lies outside [0, 1] (other
            data, loss or weight decay) leaves at ``t = 0`` (a SLIDE_END record), to the
            side its one-sided rates decide. In a deep network a given sliding unit more
            than half a round-off band of this call off its surface (a state saved at
            looser tolerances) is put on it at ``t = 0`` (:func:`gflow.kinks.onto_surfaces`),
            a jump of the loss by ``stats["surface_jump"]``.
        motion_tol: hold the local errors also to this fraction of the distance the
            weights still have to go, for losses that fall by many orders. Near a minimum
            of loss 0 that distance is about ``2L/‖θ̇‖`` (exact for a quadratic loss whose
            Hessian is a multiple of the identity), and an error ``δ`` in the weights is an
            error ``δ/(2L/‖θ̇‖)`` in the field, relative: tolerances fixed against the
            weights' size stop resolving the flow, and a deep network's kink decisions,
            once that distance is down to them. After every accepted step ``rtol`` and
            ``atol`` are both multiplied by ``f = min(1, motion_tol·(2L/‖θ̇‖) / (atol +
            rtol·‖θ‖_rms))``, never below ``f·rtol = 1e-15`` (a few ulps: float64's floor);
            ``stats["tolerance_factor"]`` is ``f`` at the end. ``None`` (default): ``f =
            1``. Costs one field evaluation per iteration; see *Choosing tolerances*.
        throw: raise ``RuntimeError`` when the status is not a success.

    Returns:
        A :class:`gflow.Solution`.

    Example:
        >>> X = jnp.array([[1.0, 0.0], [0.0, 1.0]]); Y = jnp.eye(2)
        >>> sol = gflow.simulate([W, V], X, Y, t1=50.0)
        >>> sol.crossings.rows(), sol.regions()
    """
    params = _as_params(params, batched=False)
    X, Y = _as_data(X, Y, loss, batched=False)
    sol = simulate_batch(
        [W[None] for W in params], X, Y, loss=loss, t1=t1, rtol=rtol, atol=atol, weight_decay=weight_decay,
        saveat=saveat, gtol=gtol, ltol=ltol, dtol=dtol, solver=solver, max_steps=max_steps, max_events=max_events,
        max_sliding=max_sliding, event_samples=event_samples, pcoeff=pcoeff, icoeff=icoeff, events=events,
        modes=modes, motion_tol=motion_tol, lanes=1, devices=1,
        throw=False,
    )[0]  # fmt: skip
    if throw and not sol.status.success:
        raise RuntimeError(f"gflow.simulate: {sol.status.name}: {sol.status.message} (t = {float(sol.t):.6g})")
    return sol


def simulate_batch(
    params,
    X,
    Y,
    *,
    loss="square",
    t1,
    rtol=1e-8,
    atol=1e-10,
    weight_decay=0.0,
    saveat=None,
    gtol=None,
    ltol=None,
    dtol=None,
    solver="dopri8",
    max_steps=100_000,
    max_events=None,
    max_sliding=None,
    event_samples=8,
    pcoeff=0.2,
    icoeff=0.4,
    events="stop",
    modes=None,
    motion_tol=None,
    lanes=16,
    devices=None,
    throw=False,
) -> Solution:
    """:func:`simulate` for a batch of trajectories, as one compiled computation.

    Every weight matrix carries a leading batch axis ``B``. ``X`` and ``Y`` are shared
    (shapes as in :func:`simulate`) or carry the same leading batch axis (one data set
    per member); ``weight_decay`` is a float or one per member; ``modes`` is ``(B, P)``
    (e.g. a batch solution's ``final_modes``; a row of ``-1`` starts that member by the
    signs, e.g. after a failed run) or ``(P,)`` for every member. The program
    is compiled once per shape and configuration and reused.

    Returns a :class:`gflow.Solution` whose fields have a leading axis ``B``: ``status``
    holds int codes (``gflow.Status``) per member, crossings are padded to
    ``max_events`` with a per-member ``count``. ``solution[b]`` is member ``b`` as a
    single-trajectory solution. One member failing (non-finite, budgets) is reported in
    its status; the others finish. ``throw=True`` raises if any member failed.

    ``lanes`` trajectories are integrated side by side; when one finishes, the next queued
    trajectory starts in its lane, so the batch costs about ``Σ iterations / lanes`` loop
    iterations (plus the longest trajectory) rather than ``max iterations`` for every
    member. On a CPU few lanes are fastest: each iteration runs the costly branches (root
    finding, event handling, restarting a lane) whenever any lane needs them, so the
    default is 16 (the authors' 288 seeds on two cores: 0.047 s at 16 lanes, 0.048 s at 8,
    0.058 s at 32). On a GPU, give every trajectory its own lane (``lanes`` ≥ batch /
    devices). The trajectories are split evenly over ``devices`` (default: every local
    device; an int takes the first ones) and run on them in parallel with one compiled
    program (``solver="kvaerno5"`` uses the first device only). On a CPU, JAX exposes one
    device unless told otherwise: set
    ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` before importing JAX to
    use every core. Results agree across lane counts to round-off as amplified by the flow (about
    1e-11 on the authors' setting), not bit for bit.
    """
    params = _as_params(params, batched=True)
    B = params[0].shape[0]
    X, Y = _as_data(X, Y, loss, batched=True, B=B)
    _check_chain(params, X, Y, loss)
    if loss not in LOSSES:
        raise ValueError(f"loss: expected one of {sorted(LOSSES)}, got {loss!r}")
    if solver not in _SOLVERS:
        raise ValueError(f"solver: expected one of {sorted(_SOLVERS)}, got {solver!r}")
    t1 = _positive("t1", t1, allow_inf=gtol is not None or ltol is not None or dtol is not None)
    rtol = _positive("rtol", rtol)
    atol = _positive("atol", atol)
    if rtol >= 1:
        raise ValueError(f"rtol: expected a value in (0, 1), got {rtol!r}")
    wd = (
        np.broadcast_to(np.asarray(weight_decay, dtype=np.float64), (B,))
        if np.ndim(weight_decay) == 0
        else np.asarray(weight_decay, np.float64)
    )
    if wd.shape != (B,) or not np.all(np.isfinite(wd)) or np.any(wd < 0):
        raise ValueError(f"weight_decay: expected a finite float >= 0 or {B} of them, got {weight_decay!r}")
    gtol_v = np.inf if gtol is None else _positive("gtol", gtol)
    dtol_v = np.inf if dtol is None else _positive("dtol", dtol)
    if events not in ("stop", "through"):
        raise ValueError(f"events: expected 'stop' or 'through', got {events!r}")
    ltol_v = np.inf if ltol is None else _positive("ltol", ltol)
    mtol_v = 1.0 if motion_tol is None else _positive("motion_tol", motion_tol)
    ts = np.zeros(0) if saveat is None else np.asarray(saveat, dtype=np.float64).reshape(-1)
    if ts.size and (not np.all(np.isfinite(ts)) or ts[0] < 0 or ts[-1] > t1 or np.any(np.diff(ts) <= 0)):
        raise ValueError(f"saveat: expected strictly increasing finite times in [0, t1={t1}], got {saveat!r}")
    n = X.shape[1]
    hidden = tuple(W.shape[1] for W in params[:-1])
    P = n * sum(hidden)
    max_events = 64 + 16 * P if max_events is None else _count("max_events", max_events)
    max_sliding = min(P, 8) if max_sliding is None else _count("max_sliding", max_sliding)
    modes = _as_modes(modes, params, X, B, P, rtol, atol, max_sliding)
    devices = _devices(devices)
    if solver in _IMPLICIT:
        # Implicit solvers run on the first device only: their linear solves fail to trace
        # under pmap (lineax compares shardings), and concurrent executions of their LU
        # kernels on several CPU devices deadlock in jaxlib 0.10 (both wait on one thread
        # pool). Their results therefore never depend on the device count.
        devices = devices[:1]
    D = len(devices)
    # Split the members as evenly as possible over the devices (contiguous shares of
    # ⌈B/D⌉ or ⌊B/D⌋) and pad each share to one power-of-two size, so that sweeps over
    # batch sizes reuse a few compiled programs. Padding rows are never integrated.
    counts = np.full(D, B // D) + (np.arange(D) < B % D)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    per = _bucket(int(counts.max()))
    cfg = Config(
        loss=loss, solver=solver, shapes=tuple(tuple(W.shape[1:]) for W in params), n=n,
        max_events=max_events, max_sliding=min(max_sliding, P),
        event_samples=max(_count("event_samples", event_samples), 1), n_save=len(ts),
        use_gtol=gtol is not None, use_ltol=ltol is not None, use_dtol=dtol is not None, through=events == "through",
        follow=motion_tol is not None,
        pcoeff=float(pcoeff), icoeff=float(icoeff),
        lanes=_bucket(min(per, _count("lanes", lanes))),
    )  # fmt: skip
    max_steps = _count("max_steps", max_steps)
    rows = np.minimum(starts[:, None] + np.arange(per), B - 1)  # (D, per); past a share: padding
    y0, X, Y, wd, modes = (a[rows] for a in (ravel(params), X, Y, wd, modes))
    scalars = (t1, rtol, atol, gtol_v, ltol_v, dtol_v, ts, max_steps, mtol_v)
    if D == 1:
        run, _ = compiled(cfg)
        with jax.default_device(devices[0]):
            out, loss_v, gnorm = run(y0[0], X[0], Y[0], wd[0], modes[0], counts[0], *scalars)
        out, loss_v, gnorm = jax.tree.map(lambda a: np.asarray(a)[None], (out, loss_v, gnorm))
    else:
        out, loss_v, gnorm = _sharded(cfg, tuple(devices))(y0, X, Y, wd, modes, counts, *scalars)
    real = np.arange(per)[None, :] < counts[:, None]  # (D, per), row-major = member order
    out, loss_v, gnorm = jax.tree.map(lambda a: np.asarray(a)[real], (out, loss_v, gnorm))
    sol = _to_solution(out, loss_v, gnorm, params, ts, n, hidden)
    if throw and not all(Status(int(s)).success for s in sol.status):
        raise RuntimeError(f"gflow.simulate_batch: {sol.message}")
    return sol


@functools.lru_cache(maxsize=32)
def _sharded(cfg, devices):
    """The batch integrator mapped over devices: one shard of trajectories per device."""
    run, _ = compiled(cfg)
    return jax.pmap(run, in_axes=(0,) * 6 + (None,) * 9, devices=list(devices))


def _as_modes(modes, params, X, B, P, rtol, atol, max_sliding):
    """``modes`` as ``(B, P)`` int8 (``-1``: decide by the sign, the default), checked
    against the pre-activations of ``params`` (see :func:`simulate`)."""
    if modes is None:
        return np.full((B, P), -1, np.int8)
    given = np.asarray(modes)
    if given.shape == (P,):
        given = np.broadcast_to(given, (B, P))
    if given.shape != (B, P):
        raise ValueError(f"modes: expected shape ({P},) or ({B}, {P}) (one mode per pre-activation), got {given.shape}")
    if not (np.issubdtype(given.dtype, np.integer) and np.all((given >= -1) & (given <= 2))):
        raise ValueError(
            f"modes: expected integers 0 (inactive), 1 (active), 2 (sliding) or -1 (by the sign), got "
            f"{given.dtype} values {np.unique(given)}"
        )
    p = np.asarray(jax.vmap(preactivations)(list(params), X))
    band = np.asarray(_noise(p, rtol, atol))[:, None]  # the engine's round-off band, per member
    # A sliding unit is held within _HELD_BAND bands of its surface (flow._held_guards):
    # a run may end with one that far off, and its final_modes must continue it.
    held = _HELD_BAND * band
    wrong = np.select([given == 1, given == 0, given == 2], [p < -band, p > band, np.abs(p) > held], False)
    if np.any(wrong):
        b, k = (int(v[0]) for v in np.nonzero(wrong))
        layer, neuron, point = (int(t[k]) for t in index_table(X.shape[1], tuple(W.shape[1] for W in params[:-1])))
        name = ("inactive", "active", "sliding")[given[b, k]]
        width = (held if given[b, k] == 2 else band)[b, 0]
        raise ValueError(
            f"modes: member {b}, pre-activation {k} (layer {layer}, neuron {neuron}, point {point}) is given "
            f"{name} but p = {p[b, k]:.3g}, outside the round-off band ±{width:.2g} of that side; expected "
            "the modes a run ended with at these params (its final_modes)"
        )
    sliding = np.sum(given == 2, axis=1)
    if np.any(sliding > max_sliding):
        raise ValueError(
            f"modes: {int(sliding.max())} sliding units in one member, more than max_sliding={max_sliding}"
        )
    return given.astype(np.int8)


def _devices(devices):
    local = jax.local_devices()
    if devices is None:
        return local
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices: expected a count in [1, {len(local)}] (local devices), got {devices!r}")
        return local[: int(devices)]
    devices = list(devices)
    if not devices or any(d not in local for d in devices):
        raise ValueError(f"devices: expected a non-empty list of local devices {local}, got {devices!r}")
    return devices


def _bucket(B):
    return 1 << max(B - 1, 0).bit_length()


# ---- conversion --------------------------------------------------------------------------
def _unravel_np(y, shapes):
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(y[..., start : start + size].reshape(y.shape[:-1] + tuple(shape)))
        start += size
    return out


def _to_solution(out, loss, gnorm, params, ts, n, hidden):
    shapes = [W.shape[1:] for W in params]
    layer_of, neuron_of, point_of = index_table(n, hidden)
    k = out["ev_k"]
    valid = k >= 0
    kk = np.where(valid, k, 0)

    def pick(table):
        return np.where(valid, table[kk], -1) if table.size else np.full(k.shape, -1)

    E = k.shape[1]
    crossings = Crossings(
        t=np.where(k >= 0, out["ev_t"], np.nan),
        layer=pick(layer_of),
        neuron=pick(neuron_of),
        point=pick(point_of),
        direction=np.where(valid, out["ev_dir"], 0),
        kind=out["ev_kind"],
        count=np.minimum(out["n_ev"], E),
    )
    return Solution(
        params=_unravel_np(out["y"], shapes),
        t=out["t"],
        loss=np.asarray(loss),
        grad_norm=np.asarray(gnorm),
        status=out["status"],
        crossings=crossings,
        ts=ts,
        ys=_unravel_np(out["saved"], shapes),
        initial_modes=out["mode0"],
        final_modes=out["mode"],
        stats=dict(
            num_accepted=out["n_acc"],
            num_rejected=out["n_rej"],
            num_events=out["n_ev"],
            num_iterations=out["n_iter"],
            tolerance_factor=out["tolf"],
            surface_jump=out["jump"],
        ),
        initial_loss=out["loss0"],
        energy=out["energy"],
        saved_energy=out["saved_energy"],
        n=n,
        hidden_widths=hidden,
    )


# ---- validation --------------------------------------------------------------------------
def _as_params(params, batched):
    if not isinstance(params, (list, tuple)) or len(params) < 2:
        raise ValueError(
            f"params: expected a list [W_1, ..., W_k] of k >= 2 weight matrices, got "
            f"{type(params).__name__}{'' if not isinstance(params, (list, tuple)) else f' of length {len(params)}'}"
        )
    out = []
    ndim = 3 if batched else 2
    for ell, W in enumerate(params):
        A = np.asarray(W)
        if A.ndim != ndim or not np.issubdtype(A.dtype, np.number) or np.iscomplexobj(A):
            what = "(B, d_l, d_{l-1})" if batched else "(d_l, d_{l-1})"
            raise ValueError(
                f"params[{ell}]: expected a real array of shape {what}, got shape {A.shape} dtype {A.dtype}"
            )
        if not np.all(np.isfinite(A)):
            raise ValueError(f"params[{ell}]: expected finite values, got {np.sum(~np.isfinite(A))} non-finite entries")
        out.append(A.astype(np.float64))
    for ell in range(1, len(out)):
        if out[ell].shape[-1] != out[ell - 1].shape[-2]:
            raise ValueError(
                f"params[{ell}]: expected {out[ell - 1].shape[-2]} columns (the width of layer {ell}), "
                f"got shape {out[ell].shape}"
            )
    if batched and len({W.shape[0] for W in out}) != 1:
        raise ValueError(f"params: expected one batch size on every matrix, got {[W.shape[0] for W in out]}")
    return out


def _as_data(X, Y, loss, batched, B=None):
    X = np.asarray(X)
    Y = np.asarray(Y)
    shared = X.ndim == 2
    if not (X.ndim == 2 or (batched and X.ndim == 3)) or not np.issubdtype(X.dtype, np.number):
        raise ValueError(
            f"X: expected a real array of shape (n, d_in){' or (B, n, d_in)' if batched else ''}, got shape {X.shape}"
        )
    if not np.all(np.isfinite(X)):
        raise ValueError(f"X: expected finite values, got {np.sum(~np.isfinite(X))} non-finite entries")
    if loss in CLASSIFICATION:
        if Y.ndim == X.ndim and Y.shape[-1] == 1:
            Y = Y[..., 0]
        if Y.shape != X.shape[:-1]:
            raise ValueError(f"Y: expected ±1 labels of shape {X.shape[:-1]} for loss={loss!r}, got shape {Y.shape}")
        if not np.all(np.isin(Y, (-1.0, 1.0))):
            raise ValueError(f"Y: expected labels in {{-1, +1}} for loss={loss!r}, got values {np.unique(Y)[:6]}")
    else:
        if Y.ndim != X.ndim or Y.shape[:-1] != X.shape[:-1]:
            raise ValueError(
                f"Y: expected shape {X.shape[:-1] + ('d_out',)} (one target per row of X), got shape {Y.shape}"
            )
        if not np.all(np.isfinite(Y)):
            raise ValueError(f"Y: expected finite values, got {np.sum(~np.isfinite(Y))} non-finite entries")
    X = X.astype(np.float64)
    Y = Y.astype(np.float64)
    if batched:
        if shared:
            X = np.broadcast_to(X, (B,) + X.shape)
            Y = np.broadcast_to(Y, (B,) + Y.shape)
        elif X.shape[0] != B or Y.shape[0] != B:
            raise ValueError(
                f"X, Y: expected a leading batch axis of size {B} (as params), got {X.shape[0]} and {Y.shape[0]}"
            )
    return X, Y


def _check_chain(params, X, Y, loss):
    if params[0].shape[-1] != X.shape[-1]:
        raise ValueError(f"params[0]: expected {X.shape[-1]} columns (d_in of X), got shape {params[0].shape}")
    d_out = 1 if loss in CLASSIFICATION else Y.shape[-1]
    if params[-1].shape[-2] != d_out:
        raise ValueError(f"params[-1]: expected {d_out} rows (d_out of Y), got shape {params[-1].shape}")


def _positive(name, value, allow_inf=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a positive float, got {value!r}") from None
    if not (v > 0) or (math.isinf(v) and not allow_inf):
        extra = " (inf only with gtol, ltol or dtol)" if name == "t1" else ""
        raise ValueError(f"{name}: expected a finite positive float{extra}, got {value!r}")
    return v


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)
