"""Matplotlib figures for the paper's two-point setting (SPEC §4).

Each function draws one panel on a given axis (or a new figure), takes plain arrays or a
:class:`gflow.Solution`, and returns the axis (or axes):

- :func:`plot_cones`: the plane of first-layer weights with the cones ``D, S, S1, S2``;
- :func:`plot_trajectory`: the same with ``w_j(t)`` of a solution and crossing markers;
- :func:`plot_regions`: region timeline per neuron (sliding intervals hatched);
- :func:`plot_loss_and_singular_values`: ``L(t)`` and ``σ_i(W(t))`` on log axes;
- :func:`plot_histogram` (with intervals marked), and its uses :func:`plot_stable_rank`,
  :func:`plot_angles`, :func:`plot_sigma_ratio`;
- :func:`plot_probability`: measured ``P[E]`` with intervals against a bound.
"""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np

__all__ = [
    "plot_angles",
    "crossing_points",
    "plot_cones",
    "plot_histogram",
    "plot_loss_and_singular_values",
    "plot_probability",
    "plot_regions",
    "plot_sigma_ratio",
    "plot_stable_rank",
    "plot_trajectory",
]

_COLOURS = {"D": "#d9d9d9", "S": "#c6dbef", "S1": "#fdd0a2", "S2": "#c7e9c0"}
_NEURON_COLOURS = ("#08519c", "#a50f15", "#54278f", "#006d2c")
_EDGE = {"D": "#969696", "S": "#6baed6", "S1": "#fd8d3c", "S2": "#74c476"}


def plot_cones(X, trajectories=None, crossings=None, ax=None, radius=None):
    """The plane of first-layer weight vectors with the cones ``D, S, S1, S2`` (SPEC §4)
    shaded and labelled, ``x_1, x_2`` drawn, and neuron trajectories on top.

    Arguments:
        X: the two data points, shape ``(2, 2)``.
        trajectories: optional array ``(S, m, 2)``: ``w_j`` at ``S`` saved times for ``m``
            neurons (e.g. ``solution.ys[0]`` of a single trajectory).
        crossings: optional list of points ``(2,)`` to mark (weights at crossings).
        ax: a Matplotlib axis (a new figure if None).
        radius: half-width of the view (default: fits the trajectories and ``x_i``).

    Returns:
        The axis.
    """
    X = np.asarray(X, dtype=float)
    if X.shape != (2, 2):
        raise ValueError(f"X: expected shape (2, 2), got {X.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    pts = [X] + ([np.asarray(trajectories).reshape(-1, 2)] if trajectories is not None else [])
    pts = np.concatenate(pts)
    r = radius or 1.15 * max(1.0, float(np.max(np.abs(pts[np.isfinite(pts)]))))
    grid = np.linspace(-r, r, 401)
    G = np.stack(np.meshgrid(grid, grid), axis=-1)
    a, b = G @ X[0] > 0, G @ X[1] > 0
    names = np.where(a & b, 1, np.where(a, 2, np.where(b, 3, 0)))
    cmap = matplotlib.colors.ListedColormap([_COLOURS[k] for k in ("D", "S", "S1", "S2")])
    ax.imshow(names, origin="lower", extent=(-r, r, -r, r), cmap=cmap, vmin=-0.5, vmax=3.5, interpolation="nearest")
    for k, name in enumerate(("D", "S", "S1", "S2")):
        mask = names == k
        if mask.any():
            c = G[mask].mean(axis=0)
            ax.text(*c, name, ha="center", va="center", fontsize=12, weight="bold")
    for i, x in enumerate(X):
        ax.annotate("", xy=x, xytext=(0, 0), arrowprops=dict(arrowstyle="->", lw=1.2, color="0.25"), zorder=2)
        ax.text(*(1.08 * x), f"$x_{i + 1}$", ha="center")
    if trajectories is not None:
        T = np.asarray(trajectories)
        for j in range(T.shape[1]):
            colour = _NEURON_COLOURS[j % len(_NEURON_COLOURS)]
            ax.plot(T[:, j, 0], T[:, j, 1], lw=2.2, color=colour, label=f"$w_{j + 1}(t)$", zorder=3)
            ax.plot(*T[0, j], "o", color=colour, mec="k", ms=6, zorder=4)
            ax.plot(*T[-1, j], "*", color=colour, mec="k", ms=13, zorder=4)
        ax.legend(loc="lower right")
    if crossings is not None:
        for w in crossings:
            ax.plot(*w, "x", color="crimson", ms=9, mew=2.2, zorder=5)
    ax.set_xlim(-r, r)
    ax.set_ylim(-r, r)
    ax.set_aspect("equal")
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    return ax


def _single(solution, name="solution"):
    if not hasattr(solution, "crossings") or np.ndim(solution.t) != 0:
        raise ValueError(f"{name}: expected a single-trajectory gflow.Solution (index a batch first: sol[b])")
    return solution


def _saved_first_layer(solution):
    ts = np.asarray(solution.ts, dtype=float)
    if ts.size < 2:
        raise ValueError(
            f"solution: expected states saved at >= 2 times (simulate(..., saveat=ts)), got {ts.size} save times"
        )
    W = np.asarray(solution.ys[0], dtype=float)  # (S, m, d_in)
    keep = np.all(np.isfinite(W.reshape(len(ts), -1)), axis=1)  # NaN after an early stop
    return ts[keep], W[keep]


def crossing_points(solution, X):
    """First-layer weight of the crossing neuron at each recorded event of ``solution``.

    Interpolated linearly between saved states, then projected onto the kink line
    ``w·x_i = 0`` of the event, so markers sit exactly on the cone boundaries.

    Returns:
        ``(points, neurons)``: ``(E, 2)`` and ``(E,)`` for the first-layer events.
    """
    solution = _single(solution)
    X = np.asarray(X, dtype=float)
    ts, W = _saved_first_layer(solution)
    cr = solution.crossings
    pts, who = [], []
    for e in range(int(cr.count)):
        if int(cr.layer[e]) != 0:
            continue
        j, i, t = int(cr.neuron[e]), int(cr.point[e]), float(cr.t[e])
        w = np.array([np.interp(t, ts, W[:, j, c]) for c in range(W.shape[2])])
        x = X[i]
        pts.append(w - (w @ x) / (x @ x) * x)
        who.append(j)
    return np.reshape(np.array(pts, dtype=float), (-1, X.shape[1])), np.array(who, dtype=int)


def plot_trajectory(solution, X, ax=None, radius=None):
    """Cones ``D, S, S1, S2`` with the first-layer weights ``w_j(t)`` of one solution on
    top (circle: start, star: end) and a red cross at every kink event of the first layer
    (crossing, slide start/end, touch).

    Arguments:
        solution: a single-trajectory :class:`gflow.Solution` of a 2-2-d network with
            saved states (``simulate(..., saveat=ts)``).
        X: its data, shape ``(2, 2)``.
        ax: a Matplotlib axis (a new figure if None).
        radius: half-width of the view.

    Returns:
        The axis.
    """
    solution = _single(solution)
    X = np.asarray(X, dtype=float)
    ts, W = _saved_first_layer(solution)
    if W.shape[2] != 2 or X.shape != (2, 2):
        raise ValueError(
            f"solution, X: expected a first layer (m, 2) and X of shape (2, 2), got {W.shape[1:]} and {X.shape}"
        )
    points, _ = crossing_points(solution, X)
    return plot_cones(X, W, crossings=list(points), ax=ax, radius=radius)


def _symlog(t):
    return t if t < 1 else 1 + np.log10(t)


def _symlog_inv(u):
    return u if u < 1 else 10 ** (u - 1)


def plot_regions(solution, ax=None, layer=0):
    """Region timeline: one bar per neuron, one segment per interval of
    :meth:`gflow.Solution.regions`, coloured by cone (SPEC §4 names for the two-point
    first layer) and hatched while the neuron slides on a kink.

    Arguments:
        solution: a single-trajectory :class:`gflow.Solution`.
        ax: a Matplotlib axis (a new figure if None).
        layer: hidden layer.

    Returns:
        The axis. The time axis is symmetric-log (linear below ``t = 1``).
    """
    solution = _single(solution)
    regions = solution.regions(layer)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.6 + 0.5 * len(regions)))
    t_end = max(float(solution.t), 1e-12)
    for nr in regions:
        for iv in nr.intervals:
            label = iv.label
            parts = label.split("|")
            sliding = len(parts) > 1
            colour = _COLOURS.get(parts[0], "#ffffff")
            width = max(iv.t_end - iv.t_start, 0.0)
            ax.barh(nr.neuron, width, left=iv.t_start, height=0.6, color=colour,
                    edgecolor=_EDGE.get(parts[0], "k"), hatch="//" if sliding else None, lw=0.8)  # fmt: skip
            mid = _symlog_inv((_symlog(iv.t_start) + _symlog(iv.t_end)) / 2)
            ax.text(mid, nr.neuron, label, ha="center", va="center", fontsize=8)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, t_end)
    ax.set_yticks(range(len(regions)), [f"neuron {nr.neuron + 1}" for nr in regions])
    ax.invert_yaxis()
    ax.set_xlabel("t (linear below 1, log above)")
    ax.set_title("region of each neuron (hatched: sliding on a kink)")
    return ax


def plot_loss_and_singular_values(solution, X, Y, axes=None):
    """``L(t)`` and the singular values of ``W(t)`` (first layer) against ``t``, log axes.

    Arguments:
        solution: a single-trajectory 2-layer :class:`gflow.Solution` with saved states.
        X, Y: its data, shapes ``(n, d_in)`` and ``(n, d_out)``.
        axes: two Matplotlib axes (a new figure if None).

    Returns:
        The two axes.
    """
    solution = _single(solution)
    if len(solution.ys) != 2:
        raise ValueError(f"solution: expected a depth-2 network [W, V], got {len(solution.ys)} layers")
    X, Y = np.asarray(X, dtype=float), np.asarray(Y, dtype=float)
    ts = np.asarray(solution.ts, dtype=float)
    W, V = (np.asarray(a, dtype=float) for a in solution.ys)
    keep = np.all(np.isfinite(W.reshape(len(ts), -1)), axis=1) & (ts > 0)
    if keep.sum() < 2:
        raise ValueError(f"solution: expected states saved at >= 2 positive times, got {int(keep.sum())}")
    ts, W, V = ts[keep], W[keep], V[keep]
    H = np.maximum(np.einsum("ni,sji->snj", X, W), 0.0)
    loss = 0.5 * np.sum((np.einsum("snj,soj->sno", H, V) - Y) ** 2, axis=(1, 2))
    sv = np.linalg.svd(W, compute_uv=False)
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax_l, ax_s = axes
    ax_l.loglog(ts, np.maximum(loss, 1e-300), color="k")
    ax_l.set_xlabel("t")
    ax_l.set_ylabel(r"$L = \frac{1}{2}\sum_i \|N(x_i) - y_i\|^2$")
    ax_l.set_title("loss")
    for k in range(sv.shape[1]):
        ax_s.loglog(ts, np.maximum(sv[:, k], 1e-300), label=rf"$\sigma_{k + 1}(W)$")
    ax_s.set_xlabel("t")
    ax_s.set_title("singular values of W")
    ax_s.legend()
    cr = solution.crossings
    for e in range(int(cr.count)):
        if cr.t[e] > 0:
            for ax in axes:
                ax.axvline(float(cr.t[e]), color="crimson", lw=0.6, ls=":")
    return axes


def plot_histogram(values, interval=None, ax=None, bins=40, xlabel=None, label=None, interval_label=None,
                   extra_interval=None, extra_label=None, value_range=None):  # fmt: skip
    """Histogram of ``values`` (NaNs dropped) with up to two intervals shaded.

    Arguments:
        values: 1-d array.
        interval: optional ``(lo, hi)`` shaded in green (e.g. the theorem's interval).
        ax: a Matplotlib axis (a new figure if None).
        bins: number of bins or bin edges.
        xlabel, label: axis label and legend label of the bars.
        interval_label: legend label of ``interval``.
        extra_interval, extra_label: a second interval, drawn as dashed red bounds.
        value_range: optional ``(lo, hi)`` range of the bins.

    Returns:
        The axis.
    """
    v = np.asarray(values, dtype=float).reshape(-1)
    v = v[np.isfinite(v)]
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8))
    if interval is not None:
        lo, hi = (float(x) for x in interval)
        if not lo <= hi:
            raise ValueError(f"interval: expected (lo, hi) with lo <= hi, got {interval!r}")
        ax.axvspan(lo, hi, color="#a1d99b", alpha=0.45, label=interval_label)
    if extra_interval is not None:
        lo, hi = (float(x) for x in extra_interval)
        for k, x in enumerate((lo, hi)):
            ax.axvline(x, color="crimson", ls="--", lw=1.2, label=extra_label if k == 0 else None)
    if v.size:
        ax.hist(v, bins=bins, range=value_range, color="#3182bd", alpha=0.85, label=label)
    else:
        ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center")
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel("runs")
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if label or interval_label or extra_label:
        ax.legend(fontsize=8)
    return ax


def plot_stable_rank(stable_rank, ax=None, bins=20, layer="W"):
    """Histogram of stable ranks ``‖·‖_F²/‖·‖_σ² ∈ [1, 2]`` of one layer (a 2x2 matrix)
    across runs, with rank 1 (stable rank 1) marked. ``layer`` names it in the labels."""
    ax = plot_histogram(
        stable_rank, ax=ax, bins=bins, value_range=(1.0, 2.0), label=layer,
        xlabel=rf"stable rank of ${layer}$: $\|{layer}\|_F^2 / \|{layer}\|_\sigma^2$",
    )  # fmt: skip
    ax.axvline(1.0, color="k", lw=1.5)
    ax.set_xlim(0.98, 2.0)
    return ax


def plot_angles(angles, interval=None, corrected=None, ax=None, bins=40, degrees=True):
    """Histogram of ``∠(w_1, w_2)`` (radians in) with the theorem's interval shaded and an
    optional corrected interval dashed. Shown in degrees unless ``degrees=False``."""
    f = np.degrees if degrees else (lambda a: a)
    ax = plot_histogram(
        f(np.asarray(angles, dtype=float)),
        interval=None if interval is None else f(np.asarray(interval, dtype=float)),
        extra_interval=None if corrected is None else f(np.asarray(corrected, dtype=float)),
        ax=ax, bins=bins, xlabel=r"$\angle(w_1, w_2)$" + (" (degrees)" if degrees else " (rad)"),
        label="runs", interval_label="paper's interval", extra_label="corrected interval",
    )  # fmt: skip
    ax.axvline(180.0 if degrees else np.pi, color="k", lw=1.2, label="antipodal: rank 1")
    ax.legend(fontsize=8)
    return ax


def plot_sigma_ratio(ratios, ax=None, bins=40):
    """Histogram of ``σ_min(W)/σ_max(W) ∈ [0, 1]`` across runs; 0 means rank 1."""
    ax = plot_histogram(ratios, ax=ax, bins=bins, value_range=(0.0, 1.0), xlabel=r"$\sigma_{min}(W)/\sigma_{max}(W)$")
    ax.axvline(0.0, color="k", lw=1.5)
    ax.set_xlim(-0.02, 1.0)
    return ax


def plot_probability(thetas, p, lo, hi, bound, ax=None, p_corrected=None):
    """Measured probabilities against ``θ_x`` (radians in, degrees shown) with error bars
    ``[lo, hi]`` and the bound ``2(θ_x/2π)²`` as a curve over ``(90°, 180°)``.

    Arguments:
        thetas, p, lo, hi: arrays of the same length.
        bound: callable ``θ ↦ bound`` (e.g. :func:`gflow.theory.theorem3_bound`).
        ax: a Matplotlib axis (a new figure if None).
        p_corrected: optional second series (hollow markers).

    Returns:
        The axis.
    """
    thetas, p, lo, hi = (np.asarray(a, dtype=float).reshape(-1) for a in (thetas, p, lo, hi))
    if not (thetas.shape == p.shape == lo.shape == hi.shape):
        raise ValueError(
            f"thetas, p, lo, hi: expected equal lengths, got {thetas.shape}, {p.shape}, {lo.shape}, {hi.shape}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8))
    grid = np.linspace(np.pi / 2 + 1e-6, np.pi - 1e-6, 200)
    ax.plot(np.degrees(grid), bound(grid), color="k", label=r"bound $2(\theta_x/2\pi)^2$")
    d = np.degrees(thetas)
    ax.errorbar(d, p, yerr=[p - lo, hi - p], fmt="o", color="#3182bd", capsize=3, label=r"measured $P[E]$ (95%)")
    if p_corrected is not None:
        ax.plot(
            d,
            np.asarray(p_corrected, dtype=float),
            "o",
            mfc="none",
            color="#e6550d",
            label=r"$P[E^*]$, corrected angle",
        )
    ax.set_xlabel(r"$\theta_x$ (degrees)")
    ax.set_ylabel("probability")
    ax.set_xlim(90, 180)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    return ax
