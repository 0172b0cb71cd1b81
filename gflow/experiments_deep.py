"""The paper's deep-network experiments (SPEC §5, Theorems 4 and 5) with exact gradient flow.

============  ==========================================================================
``thm4``      Square loss with weight decay ``λ``, swept downwards with warm starts:
              each stage integrates to the stationary point of ``L + (λ/2)‖θ‖²``
              (``‖∇‖ < gtol``). Per layer ``r(W_j) = ‖W_j‖_σ/‖W_j‖_F``, their average
              (Eq. 3) and harmonic mean of ``1/r`` (Eq. 4) against Theorem 4's bound.
``thm5``      Exponential loss to a long horizon (``t1 = 1e8`` by default): the rank
              ratios and the normalised margin ``min_i y_i N(x_i)/‖θ‖^{k'}`` along
              log-spaced times, against Theorem 5's bound.
============  ==========================================================================

Both train depth-``k'`` students (``k' ∈ depths``) of one hidden ``width`` on data realised
by a random depth-2 teacher of known ``B`` (:func:`gflow.theory.teacher_data`), from
``runs`` Xavier-normal starts each, and add a width sweep at ``sweep_depth`` so that one
can see the result does not depend on width. Every configuration (depth, width) is one
chunk, written atomically with provenance and reused on restart (as in
:mod:`gflow.experiments`); the result dict has the same keys as there.

Besides the paper's bound (which holds for the global optimum ``θ*``), every run reports
the a-posteriori bound of the proofs' inequality chain, valid for *any* net:
``(1/k') Σ_j r(W_j) ≥ (max_{‖x_i‖≤1} |N(x_i)|)^{1/k'} · √(k'/‖θ‖²)``
(AM–GM, ``|N(x)| ≤ ‖x‖ Π_j ‖W_j‖_σ``, and geometric ≤ quadratic mean). A run whose
average falls below the paper's bound must therefore have ``‖θ‖²`` above the proof's
``‖θ'‖²`` (:func:`gflow.theory.theorem4_norm_sq`, ``theorem5_norm_sq``): a stationary
point that is not the global minimum-norm solution, which the summary counts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from . import theory
from ._chunks import _run_chunks
from .experiments import _count, _finish, _out, _positive, _row, _seed, _success
from .networks import init_params
from .reference import balance_drift, preactivations
from .solve import simulate_batch

__all__ = ["DEPTHS", "THM4_LAMBDAS", "save_figures", "thm4", "thm5", "unflatten"]

DEPTHS = (2, 3, 4, 5, 6, 8, 10)
"""Default student depths ``k'`` of :func:`thm4` and :func:`thm5`."""

THM4_LAMBDAS = (1e-2, 1e-3)
"""Default weight-decay schedule of :func:`thm4` (each stage starts where the last ended)."""

_D_IN = 4  # input dimension of the teacher data
_TEACHER_WIDTH = 3  # hidden width of the depth-2 teacher (k = 2)


# ------------------------------------------------------------------------------ inputs


def _ints(name, values, lo):
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a sequence of ints >= {lo}, got {values!r}") from None
    if not out or any(v < lo or v != w for v, w in zip(out, values)):
        raise ValueError(f"{name}: expected a non-empty sequence of ints >= {lo}, got {values!r}")
    return out


def _grid(depths, width, widths, sweep_depth, runs, n_points):
    """Checked sweep arguments shared by :func:`thm4` and :func:`thm5`, and the (depth,
    width) configurations: the depth sweep at ``width``, then the width sweep at
    ``sweep_depth`` (without repeating a configuration). Returns ``(depths, widths,
    width, runs, n_points, sweep_depth, grid)``."""
    depths = _ints("depths", depths, 2)
    widths = _ints("widths", widths, 1)
    width, runs, n_points = _count("width", width), _count("runs", runs), _count("n_points", n_points)
    sweep_depth = _count("sweep_depth", sweep_depth)
    grid = [(d, width) for d in depths]
    grid += [(sweep_depth, w) for w in widths if (sweep_depth, w) not in grid]
    return depths, widths, width, runs, n_points, sweep_depth, grid


def _padding(grid):
    """Largest depth, width (or input dimension) and weight count over ``grid``: the
    NaN-padded sizes of the per-run arrays."""
    return (
        max(d for d, _ in grid),
        max(max(w for _, w in grid), _D_IN),
        max(_size(d, w) for d, w in grid),
    )


def _teacher(seed, theorem, n):
    return theory.teacher_data(jax.random.PRNGKey(seed), n, (_D_IN, _TEACHER_WIDTH, 1), theorem=theorem, gap=0.1)


def _starts(seed, depth, width, runs):
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed + 1), depth), width)
    return init_params(key, (_D_IN,) + (width,) * (depth - 1) + (1,), batch=runs)


# --------------------------------------------------------------------------- measures


def _pad(a, shape):
    out = np.full(shape, np.nan)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


def _size(depth, width):
    """Number of weights of a depth-``depth`` student of hidden ``width``."""
    return _D_IN * width + (depth - 2) * width * width + width


def unflatten(theta, depth, width):
    """The weight matrices ``[W_1, ..., W_k']`` of one run from its row of ``arrays["theta"]``."""
    shapes = [(width, _D_IN)] + [(width, width)] * (depth - 2) + [(1, width)]
    out, start = [], 0
    for shape in shapes:
        out.append(np.asarray(theta[start : start + shape[0] * shape[1]]).reshape(shape))
        start += shape[0] * shape[1]
    return out


def _measures(params, X, kmax, wmax, dmax):
    """Per member: the flat weights (NaN-padded to ``dmax``), layer ratios (NaN-padded to
    ``kmax``), their mean and harmonic mean, ``‖θ‖²``, the a-posteriori chain bound, and
    every layer's singular values."""
    k = len(params)
    ratios = theory.layer_ratios(params)  # (R, k)
    norm_sq = sum(np.sum(W**2, axis=(1, 2)) for W in params)
    out = _forward(params, X)[..., 0]  # (R, n)
    inside = np.linalg.norm(X, axis=1) <= 1 + 1e-12
    reach = np.max(np.abs(out[:, inside]), axis=1)
    sv = np.stack([_pad(theory.singular_values(W), (len(W), wmax)) for W in params], axis=1)  # (R, k, wmax)
    theta = np.concatenate([W.reshape(len(W), -1) for W in params], axis=1)
    return dict(
        theta=_pad(theta, (len(theta), dmax)),
        ratios=_pad(ratios, (len(ratios), kmax)),
        mean_r=np.mean(ratios, axis=1),
        harmonic=1.0 / np.mean(ratios, axis=1),
        norm_sq=norm_sq,
        chain_bound=reach ** (1.0 / k) * np.sqrt(k / norm_sq),
        singular_values=_pad(sv, (len(sv), kmax, wmax)),
    )


def _forward(params, X):
    """NumPy forward pass of a batch of nets, ``(R, n, d_out)``."""
    h = np.broadcast_to(X, (len(params[0]),) + X.shape)
    for W in params[:-1]:
        h = np.maximum(h @ np.swapaxes(W, 1, 2), 0.0)
    return h @ np.swapaxes(params[-1], 1, 2)


def _checks(sol, X, rtol, atol):
    """Per member of a batch solution: the energy identity's relative defect
    (:attr:`gflow.Solution.energy_defect`) and the largest mode gap at the end
    (:meth:`gflow.Solution.mode_gaps`) in units of the event band ``10·(atol +
    rtol·max(1, max|p|))``: at most 1 where the modes describe the weights."""
    gaps = []
    for b in range(len(sol.status)):
        member = sol[b]
        p = np.concatenate([z.ravel() for z in preactivations(member.params, X)])
        band = 10.0 * (atol + rtol * max(1.0, float(np.max(np.abs(p)))))
        gaps.append(float(np.max(member.mode_gaps(X))) / band)
    return dict(energy_defect=np.asarray(sol.energy_defect, np.float64), mode_gap=np.asarray(gaps))


def _drift(params0, params, scale):
    """Largest change of the SPEC §3 invariants of each run, relative to ``scale``."""
    return np.array([balance_drift([W[b] for W in params0], [W[b] for W in params], scale=scale[b])
                     for b in range(len(params[0]))])  # fmt: skip


# ------------------------------------------------------------------------ Theorem 4


def thm4(
    depths: Sequence[int] = DEPTHS,
    width: int = 4,
    runs: int = 3,
    seed: int = 0,
    *,
    widths: Sequence[int] = (2, 4, 8),
    sweep_depth: int = 4,
    n_points: int = 8,
    lambdas: Sequence[float] = THM4_LAMBDAS,
    gtol: float = 1e-9,
    t1: float = 1e8,
    rtol: float = 1e-9,
    atol: float = 1e-11,
    max_steps: int = 200_000,
    solver: str = "kvaerno5",
    events: str = "stop",
    out=None,
    progress=None,
) -> dict:
    """Theorem 4: minimum-norm interpolation (square loss + small weight decay) by deeper nets.

    Data: ``n_points`` on the unit sphere in R⁴ with targets ``y = N(x) ≥ 0`` of a random
    balanced depth-2 teacher of width 3 (:func:`gflow.theory.teacher_data`, ``max y = 1``),
    whose layer norm ``B`` enters the bound ``(1/B)^{2/k'}``
    (:func:`gflow.theory.theorem4_bound`). For every configuration ``runs`` students start
    Xavier-normal and follow the exact gradient flow of ``L + (λ/2)‖θ‖²`` to its stationary
    point (status ``CONVERGED``, ``‖∇‖ < gtol``) for each ``λ`` in ``lambdas`` in turn, each
    stage starting where the previous one ended: its weights and the mode of every unit
    (``modes=``, see :func:`gflow.simulate`), so that a neuron that died on its surface
    stays dead (after a failed stage, its status kept in ``status``: the weights alone, by
    the signs). As ``λ → 0`` the stationary points approach interpolating nets of locally
    minimal norm.

    Arguments:
        depths: student depths ``k' ≥ 3`` for the bound (``2`` is included as the
            teacher's depth, bound-free); hidden ``width`` for the depth sweep.
        runs: starts per configuration; ``seed`` fixes data and starts.
        widths, sweep_depth: the width sweep (depth ``sweep_depth``).
        n_points: data set size.
        lambdas: decreasing positive weight decays.
        gtol, t1, rtol, atol, max_steps, solver, events: passed to :func:`gflow.simulate_batch`.
            The default solver is the implicit ``kvaerno5``: near a stationary point of
            ``L + (λ/2)‖θ‖²`` the flow is stiff (curvatures from ``λ`` to ``O(‖X‖²)``), and
            an explicit solver needs ~``1/λ`` steps of bounded size to get there.
        out: folder for resumable chunks and results; progress: ``callable(done, total)``.

    Returns:
        The result dict (see :mod:`gflow.experiments`). ``arrays`` hold one row per run:
        ``depth``, ``width``, ``run``; per stage (axis 1, one per ``λ``) ``status``,
        ``t``, ``loss``, ``mean_r``, ``harmonic``, ``norm_sq``, ``chain_bound``,
        ``energy_defect`` and ``mode_gap`` (:func:`_checks`: the energy identity's relative
        defect, the largest mode gap at the stage's end in event bands); at the
        end ``ratios`` (``(N, max depth)``, NaN-padded), ``singular_values``
        (``(N, max depth, max width)``), ``theta`` (flat final weights, NaN-padded; see
        :func:`unflatten`), ``bound``, ``norm_bound``, ``steps``, ``events``, and ``fits``:
        the last stage's ``L`` is below 5% of ``½‖Y‖²`` (the zero network's loss), i.e.
        the run interpolates up to the weight decay's bias rather than sitting at a
        stationary point with dead units, which the theorem is not about.
    """
    t_start = time.perf_counter()
    depths, widths, width, runs, n_points, sweep_depth, grid = _grid(depths, width, widths, sweep_depth, runs, n_points)
    seed = _seed(seed)
    lambdas = tuple(_positive("lambdas", lam) for lam in lambdas)
    if not lambdas or any(b >= a for a, b in zip(lambdas, lambdas[1:])):
        raise ValueError(f"lambdas: expected a non-empty strictly decreasing sequence, got {lambdas!r}")
    gtol, t1, rtol, atol = (_positive(k, v) for k, v in (("gtol", gtol), ("t1", t1), ("rtol", rtol), ("atol", atol)))
    max_steps = _count("max_steps", max_steps)
    out = _out(out)
    config = dict(
        depths=list(depths), width=width, runs=runs, seed=seed, widths=list(widths), sweep_depth=sweep_depth,
        n_points=n_points, lambdas=list(lambdas), gtol=gtol, t1=t1, rtol=rtol, atol=atol, max_steps=max_steps,
        solver=solver, events=events, teacher=f"depth 2, widths ({_D_IN}, {_TEACHER_WIDTH}, 1), theory.teacher_data(theorem=4)",
        init="xavier_normal",
    )  # fmt: skip
    td = _teacher(seed, 4, n_points)
    kmax, wmax, dmax = _padding(grid)

    def compute(start, stop):
        depth, w = grid[start // runs]
        params = _starts(seed, depth, w, runs)
        stages = []
        steps = events_n = 0
        modes = None  # the first stage decides by the signs, later ones continue the last
        for lam in lambdas:
            sol = simulate_batch(
                params, td.X, td.Y, loss="square", weight_decay=lam, t1=t1, gtol=gtol, rtol=rtol, atol=atol,
                max_steps=max_steps, max_sliding=16, solver=solver, events=events, modes=modes,
            )  # fmt: skip
            # A member whose stage failed (e.g. more units sliding than max_sliding) has no
            # state to continue: its next stage starts from its weights by the signs (-1).
            params, modes = sol.params, np.where(_success(sol.status)[:, None], sol.final_modes, -1)
            steps = steps + sol.stats["num_iterations"]
            events_n = events_n + sol.stats["num_events"]
            stages.append(dict(status=sol.status, t=sol.t, loss=sol.loss, **_checks(sol, td.X, rtol, atol),
                               **_measures(params, td.X, kmax, wmax, dmax)))  # fmt: skip
        stacked = {k: np.stack([s[k] for s in stages], axis=1) for k in ("status", "t", "loss", "mean_r", "harmonic",
                                                                           "norm_sq", "chain_bound", "energy_defect",
                                                                           "mode_gap")}  # fmt: skip
        last = stages[-1]
        return dict(
            stacked, depth=np.full(runs, depth), width=np.full(runs, w), run=np.arange(runs),
            theta=last["theta"], ratios=last["ratios"], singular_values=last["singular_values"], steps=steps,
            events=events_n,
        )  # fmt: skip

    a, computed, reused = _run_chunks("thm4", config, len(grid) * runs, runs, compute, out, progress)
    kp = a["depth"]
    deep = kp > 2
    a["bound"] = np.where(deep, theory.theorem4_bound(2, np.maximum(kp, 3), td.B), np.nan)
    a["norm_bound"] = np.where(deep, theory.theorem4_norm_sq(2, np.maximum(kp, 3), td.B), np.nan)
    a["fits"] = a["loss"][:, -1] < 0.05 * 0.5 * np.sum(td.Y**2)
    summary = _summary(a, "Theorem 4", a["fits"], a["loss"][:, -1]) + _check_rows(a)
    extra = dict(teacher=dict(X=td.X, Y=td.Y, B=td.B))
    return _finish("thm4", config, a, summary, out, t_start, computed, reused, extra=extra)


# ------------------------------------------------------------------------ Theorem 5


def thm5(
    depths: Sequence[int] = DEPTHS,
    width: int = 4,
    runs: int = 3,
    seed: int = 0,
    *,
    widths: Sequence[int] = (2, 4, 8),
    sweep_depth: int = 4,
    n_points: int = 8,
    t1: float = 1e8,
    n_save: int = 33,
    dtol: float | None = None,
    rtol: float = 1e-9,
    atol: float = 1e-11,
    max_steps: int = 200_000,
    events: str = "stop",
    out=None,
    progress=None,
) -> dict:
    """Theorem 5: margin maximisation (exponential loss) by deeper nets, read off the direction.

    Data: ``n_points`` on the unit sphere in R⁴ labelled ``±1`` by a random balanced
    depth-2 teacher of width 3 scaled to margin 1 (:func:`gflow.theory.teacher_data`,
    ``theorem=5``); its layer norm ``B`` enters the bound
    :func:`gflow.theory.theorem5_bound`. Students start Xavier-normal and follow the exact
    gradient flow of the exponential loss to ``t1`` (or until the direction settles,
    ``dtol``). By the Lyu–Li lemma the direction converges to a KKT point of the
    max-margin problem while ``‖θ‖`` grows like ``log t``, so the scale-invariant ratios
    are tracked at ``n_save`` times log-spaced from 1 to ``t1``.

    Arguments:
        As :func:`thm4`; ``n_save`` save times; ``dtol`` stops a run whose direction
        moves slower than that per unit of ``log t`` (status ``DIRECTION_SETTLED``).

    Returns:
        The result dict; ``arrays`` per run: ``depth``, ``width``, ``run``, ``status``,
        ``t``, ``loss``, ``steps``, ``events``, the end-point measures (``ratios``,
        ``mean_r``, ``harmonic``, ``norm_sq``, ``chain_bound``, ``singular_values``),
        ``drift`` (SPEC §3 invariants, relative), ``energy_defect`` and ``mode_gap``
        (:func:`_checks`), ``margin`` (the normalised margin at the
        end), ``fits`` (every margin positive: the loss tends to 0, the lemma's case),
        ``theta`` (see :func:`unflatten`) and along ``ts`` (axis 1): ``mean_r_t``,
        ``margin_t``, ``norm_t``; ``bound``, ``norm_bound``.
    """
    t_start = time.perf_counter()
    depths, widths, width, runs, n_points, sweep_depth, grid = _grid(depths, width, widths, sweep_depth, runs, n_points)
    n_save = _count("n_save", n_save)
    seed = _seed(seed)
    t1, rtol, atol = (_positive(k, v) for k, v in (("t1", t1), ("rtol", rtol), ("atol", atol)))
    dtol = None if dtol is None else _positive("dtol", dtol)
    if t1 <= 1:
        raise ValueError(f"t1: expected a time > 1 (ratios are tracked from t = 1), got {t1!r}")
    max_steps = _count("max_steps", max_steps)
    out = _out(out)
    ts = np.geomspace(1.0, t1, n_save)
    config = dict(
        depths=list(depths), width=width, runs=runs, seed=seed, widths=list(widths), sweep_depth=sweep_depth,
        n_points=n_points, t1=t1, n_save=n_save, dtol=dtol, rtol=rtol, atol=atol, max_steps=max_steps, events=events,
        teacher=f"depth 2, widths ({_D_IN}, {_TEACHER_WIDTH}, 1), theory.teacher_data(theorem=5, gap=0.1)",
        init="xavier_normal", loss="exponential",
    )  # fmt: skip
    td = _teacher(seed, 5, n_points)
    y = td.Y[:, 0]
    kmax, wmax, dmax = _padding(grid)

    def compute(start, stop):
        depth, w = grid[start // runs]
        params0 = _starts(seed, depth, w, runs)
        sol = simulate_batch(
            params0, td.X, y, loss="exponential", t1=t1, dtol=dtol, saveat=ts, rtol=rtol, atol=atol,
            max_steps=max_steps, max_sliding=16, events=events,
        )  # fmt: skip
        m = _measures(sol.params, td.X, kmax, wmax, dmax)
        scale = np.maximum(m["norm_sq"], 1.0)
        mean_t, margin_t, norm_t = (np.full((runs, n_save), np.nan) for _ in range(3))
        for i in range(n_save):
            p = [Y[:, i] for Y in sol.ys]
            ok = np.all(np.isfinite(p[0].reshape(runs, -1)), axis=1)
            if ok.any():
                mean_t[ok, i] = theory.ratio_summary([W[ok] for W in p]).mean
                margin_t[ok, i], norm_t[ok, i] = _margin([W[ok] for W in p], td.X, y)
        return dict(
            m, **_checks(sol, td.X, rtol, atol), depth=np.full(runs, depth), width=np.full(runs, w),
            run=np.arange(runs), status=sol.status, t=sol.t,
            loss=sol.loss, steps=sol.stats["num_iterations"], events=sol.stats["num_events"],
            drift=_drift(params0, sol.params, scale), margin=_margin(sol.params, td.X, y)[0], mean_r_t=mean_t,
            margin_t=margin_t, norm_t=norm_t,
        )  # fmt: skip

    a, computed, reused = _run_chunks("thm5", config, len(grid) * runs, runs, compute, out, progress)
    kp = a["depth"]
    deep = kp > 2
    a["bound"] = np.where(deep, theory.theorem5_bound(2, np.maximum(kp, 3), td.B), np.nan)
    a["norm_bound"] = np.where(deep, theory.theorem5_norm_sq(2, np.maximum(kp, 3), td.B), np.nan)
    a["fits"] = a["margin"] > 0
    summary = _summary(a, "Theorem 5", a["fits"], a["loss"]) + _check_rows(a)
    # Among the runs that fit (a dead network reaches t1 in a few steps without moving):
    # the longest horizon, and of the runs that reached it the one with the worst drift.
    ok = _success(a["status"]) & (a["fits"] if np.any(a["fits"]) else True)
    t_max = np.max(np.where(ok, a["t"], -np.inf))
    longest = int(np.argmax(np.where(ok & (a["t"] == t_max), np.nan_to_num(a["drift"], nan=np.inf), -np.inf)))
    summary.append(
        _row(
            "longest horizon reached (runs that fit): t / steps / worst relative §3 drift",
            f"{a['t'][longest]:.3g} / {int(a['steps'][longest])} / {a['drift'][longest]:.1e}",
            "t = 1e8 without overflow",
            bool(a["t"][longest] >= min(t1, 1e8) and np.isfinite(a["drift"][longest])),
        )
    )
    extra = dict(teacher=dict(X=td.X, Y=td.Y, B=td.B), ts=ts)
    return _finish("thm5", config, a, summary, out, t_start, computed, reused, extra=extra)


def _margin(params, X, y):
    """Normalised margin ``min_i y_i N(x_i)/‖θ‖^{k'}`` and ``‖θ‖`` per member."""
    norm = np.sqrt(sum(np.sum(W**2, axis=(1, 2)) for W in params))
    out = _forward(params, X)[..., 0]
    return np.min(y * out, axis=1) / norm ** len(params), norm


# --------------------------------------------------------------------------- summary


def _summary(a, theorem, fit, loss):
    """Table rows: per (depth, width) the measured averages over the runs that ``fit``
    (finished and, for Theorem 5, classify every point) against the bound; runs below
    the bound are counted with how many of them have ``‖θ‖²`` above the proof's."""
    mean_r = a["mean_r"][:, -1] if a["mean_r"].ndim == 2 else a["mean_r"]
    norm_sq = a["norm_sq"][:, -1] if a["norm_sq"].ndim == 2 else a["norm_sq"]
    status = a["status"][:, -1] if a["status"].ndim == 2 else a["status"]
    ok = _success(status)
    fit = fit & ok
    rows = [
        _row("runs finished (status a success)", f"{int(ok.sum())}/{len(ok)}", "all", bool(ok.all())),
        _row("runs that fit the data: " + ("every margin > 0" if theorem == "Theorem 5" else "L < 5% of ½‖Y‖²"),
             f"{int(fit.sum())}/{len(ok)}", "the theorem is about these"),
    ]  # fmt: skip
    for depth, width in sorted({(int(d), int(w)) for d, w in zip(a["depth"], a["width"])}):
        m = (a["depth"] == depth) & (a["width"] == width) & fit
        label = f"k' = {depth}, width {width}: avg r min / median"
        if not m.any():
            rows.append(_row(label, "no run fits", "—"))
            continue
        bound = a["bound"][m][0]
        measured = (
            f"{np.min(mean_r[m]):.3f} / {np.median(mean_r[m]):.3f} ({int(m.sum())} runs, loss ≤ {np.max(loss[m]):.1e})"
        )
        if np.isnan(bound):
            rows.append(_row(label, measured, "teacher depth: no bound"))
            continue
        below = m & (mean_r < a["bound"])
        if below.any():
            above_norm = int(np.sum(norm_sq[below] > a["norm_bound"][below]))
            measured += f"; {int(below.sum())} below, {above_norm} of them with ‖θ‖² > the proof's ‖θ'‖²"
        rows.append(_row(label, measured, f"≥ {bound:.3f} ({theorem})", bool(not below.any())))
    return rows


def _check_rows(a):
    """Table rows: the largest energy-identity defect (per stage for Theorem 4) and mode
    gap over the runs that finished. The defect is the integration error of the run
    relative to the loss it dissipated, so it is reported, not judged: it shrinks with
    the tolerances (Theorem 4's later stages start at the last one's stationary point and
    dissipate about 1e-5 of the loss, so the same absolute error is a larger part)."""
    ok = _success(a["status"])
    defect, gap = (np.where(ok, a[k], np.nan) for k in ("energy_defect", "mode_gap"))
    if not ok.any():
        return [_row("energy identity, mode gaps", "no run finished", "—")]
    per_stage = np.atleast_2d(defect.T).T  # (runs, stages)
    measured = " / ".join(f"{np.nanmax(d):.1e}" if np.isfinite(d).any() else "—" for d in per_stage.T)
    return [
        _row("energy identity: largest relative defect (runs finished" + ("; per stage)" if defect.ndim == 2 else ")"),
             measured, "→ 0 with the tolerances (integration error)"),
        _row("mode gaps at the end: largest, in event bands 10·(atol + rtol·max|p|)", f"{np.nanmax(gap):.2g}",
             "≤ 1 (modes describe the weights)", bool(np.nanmax(gap) <= 1.0)),
    ]  # fmt: skip


# --------------------------------------------------------------------------- figures


def save_figures(result: dict, folder) -> list[Path]:
    """PNG figures of a :func:`thm4` / :func:`thm5` result in ``folder``; returns the paths.

    ``<name>_depth.png``: average ratio against depth (runs as points, median as a line,
    the theorem's bound curve; only finished runs that fit the data, ``arrays["fits"]``); ``<name>_spectra.png``: the singular values of every layer
    at the end, one panel per depth; ``thm5_time.png``: average ratio and normalised margin
    against ``t`` (log scale) per depth.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    name, a, cfg = result["name"], result["arrays"], result["config"]
    if name not in ("thm4", "thm5"):
        raise ValueError(f"result: expected a result of thm4 or thm5, got name {name!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    B = result["teacher"]["B"]
    bound_fn = theory.theorem4_bound if name == "thm4" else theory.theorem5_bound
    mean_r = a["mean_r"][:, -1] if a["mean_r"].ndim == 2 else a["mean_r"]
    fit = _success(a["status"][:, -1] if a["status"].ndim == 2 else a["status"]) & a["fits"]
    on_depth = (a["width"] == cfg["width"]) & fit

    def save(fig, stem):
        fig.tight_layout()
        path = folder / f"{stem}.png"
        fig.savefig(path, dpi=120)
        paths.append(path)

    fig = Figure(figsize=(11, 4.2))
    ax, ax2 = fig.subplots(1, 2)
    depths = np.array(sorted(set(a["depth"][a["width"] == cfg["width"]].tolist())))
    ax.plot(a["depth"][on_depth], mean_r[on_depth], "o", color="#3182bd", alpha=0.6, label="runs (end point)")
    have = [d for d in depths if (on_depth & (a["depth"] == d)).any()]
    ax.plot(have, [np.median(mean_r[on_depth & (a["depth"] == d)]) for d in have], "-", color="#08519c", label="median")
    kk = np.arange(3, max(depths.max(), 3) + 1)
    ax.plot(kk, bound_fn(2, kk, B), "k--", marker="_", ms=12, label=f"bound (k = 2, B = {B:.2f})")
    ax.axhline(1.0 if name == "thm4" else 1 / np.sqrt(2), color="grey", lw=0.8, ls=":", label="limit k' → ∞")
    ax.set_xlabel("depth k'")
    ax.set_ylabel(r"$(1/k')\,\Sigma_j\, \|W_j\|_\sigma / \|W_j\|_F$")
    what = f"square loss, λ = {cfg['lambdas'][-1]:g}" if name == "thm4" else f"exponential loss, t = {cfg['t1']:g}"
    ax.set_title(f"Theorem {name[-1]} ({what}); width {cfg['width']}")
    ax.legend(fontsize=8)
    sweep = (a["depth"] == cfg["sweep_depth"]) & fit
    ax2.plot(a["width"][sweep], mean_r[sweep], "o", color="#e6550d", alpha=0.7, label="runs (end point)")
    ax2.axhline(bound_fn(2, max(cfg["sweep_depth"], 3), B), color="k", ls="--", label="bound")
    if sweep.any():
        ax2.set_xscale("log", base=2)
    ax2.set_xlabel("width")
    ax2.set_ylabel(ax.get_ylabel())
    ax2.set_title(f"width sweep at depth {cfg['sweep_depth']}")
    ax2.legend(fontsize=8)
    save(fig, f"{name}_depth")

    cols = min(5, depths.size)
    rows = -(-depths.size // cols)
    fig = Figure(figsize=(3.2 * cols, 2.8 * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, d in zip(axes, depths):
        pick = np.flatnonzero(on_depth & (a["depth"] == d))
        if pick.size == 0:
            ax.text(0.5, 0.5, "no run fits", ha="center", transform=ax.transAxes)
            continue
        b = int(pick[0])
        for j in range(d):
            sv = a["singular_values"][b, j]
            sv = sv[np.isfinite(sv)]
            colour = colormaps["viridis"](0.9 * j / max(d - 1, 1))  # first layer dark, last light
            ax.semilogy(np.arange(1, sv.size + 1), np.maximum(sv, 1e-16), "o-", ms=3, lw=1, color=colour)
        ax.set_title(f"k' = {d}, run {int(a['run'][b])}", fontsize=9)
        ax.set_xlabel("index", fontsize=8)
    for ax in axes[depths.size :]:
        ax.axis("off")
    axes[0].set_ylabel("singular values")
    fig.suptitle(r"singular values of each layer at the end, one run per depth (colour: layer, $W_1$ dark "
                 r"$\to$ $W_{k'}$ light)", fontsize=10)  # fmt: skip
    save(fig, f"{name}_spectra")

    if name == "thm5":
        ts = np.asarray(result["ts"])
        fig = Figure(figsize=(11, 4.2))
        ax, ax2 = fig.subplots(1, 2)
        colours = colormaps["viridis"](np.linspace(0, 1, depths.size))
        for d, c in zip(depths, colours):
            m = on_depth & (a["depth"] == d)
            if not m.any():
                continue
            ax.semilogx(ts, np.nanmedian(a["mean_r_t"][m], axis=0), color=c, label=f"k' = {d}")
            ax2.semilogx(ts, np.nanmedian(a["margin_t"][m], axis=0), color=c)
        ax.axhline(1 / np.sqrt(2), color="grey", lw=0.8, ls=":", label="limit k' → ∞")
        ax.set_xlabel("t")
        ax.set_ylabel("average ratio (median over runs)")
        ax.legend(fontsize=7, ncol=2)
        ax2.set_xlabel("t")
        ax2.set_ylabel(r"normalised margin $\min_i y_i N(x_i)/\|\theta\|^{k'}$")
        ax2.set_yscale("symlog", linthresh=1e-6)
        save(fig, "thm5_time")
    return paths
