"""Matplotlib figures for the paper's two-point setting (SPEC §4).

Each function draws one panel on a given axis (or a new figure), takes plain arrays or a
:class:`gflow.Solution`, and returns the axis (or axes):

- :func:`plot_cones`: the plane of first-layer weights with the cones ``D, S, S1, S2``;
- :func:`plot_trajectory`: the same with ``w_j(t)`` of a solution and crossing markers;
- :func:`plot_regions`: region timeline per neuron in the same colours, with a legend
  (sliding intervals hatched);
- :func:`plot_loss_and_singular_values`: ``L(t)`` and ``σ_i(W(t))`` on log axes;
- :func:`plot_histogram` (with intervals marked), and its uses :func:`plot_stable_rank`,
  :func:`plot_angles`, :func:`plot_sigma_ratio`;
- :func:`plot_probability`: measured ``P[E]`` with intervals against a bound.
"""

from __future__ import annotations

import matplotlib
import matplotlib.patches
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


def _region_style(label, others=None):
    """Face colour, edge colour (also the hatch's) and hatch of a region label, the same in
    every figure: a cone of SPEC §4 is filled with its colour (as in :func:`plot_cones`); a
    sliding label ``"A|B"`` is filled with ``A``'s colour and hatched with ``B``'s edge
    colour; ``"origin"`` (``w = 0``) is white, cross-hatched in dark grey. Other labels
    (activation patterns outside the two-point setting) take the next light colour of ``tab20``
    from ``others`` (a dict label → colour, filled in as labels come), hatched when a unit
    slides (a ``"0"`` in the pattern)."""
    parts = label.split("|")
    if label == "origin":
        return dict(facecolor="#ffffff", edgecolor="#525252", hatch="xx")
    if label in _COLOURS:
        return dict(facecolor=_COLOURS[label], edgecolor=_EDGE[label], hatch=None)
    if len(parts) == 2 and all(q in _COLOURS for q in parts):
        return dict(facecolor=_COLOURS[parts[0]], edgecolor=_EDGE[parts[1]], hatch="///")
    others = {} if others is None else others
    if label not in others:
        others[label] = matplotlib.colormaps["tab20"]((2 * len(others) + 1) % 20)  # the light ones
    return dict(facecolor=others[label], edgecolor="0.3", hatch="///" if "0" in label else None)


def _legend_name(label):
    if label == "origin":
        return "origin ($w = 0$)"
    if label.count("|") == 1:
        return f"{label} (sliding)"
    return label


def _legend_order(label):
    cones = ("D", "S", "S1", "S2")
    if label in cones:
        return (0, cones.index(label), label)
    return (1 if "|" in label else 2 if label == "origin" else 3, 0, label)


def plot_regions(solution, ax=None, layer=0, legend=True):
    """Region timeline: one bar per neuron, one segment per interval of
    :meth:`gflow.Solution.regions`, in the colours of :func:`plot_cones` (sliding
    intervals hatched with the colour of the other side, ``origin`` cross-hatched) and a
    legend of the regions shown; neuron ``j`` is named in the colour of its ``w_j(t)`` in
    :func:`plot_trajectory`. A segment is labelled inside only where it spans at least
    a fifth of the axis, so labels never overlap; short ones are read from the legend.

    The time axis is symmetric-log: linear from 0 up to the decade of the first region
    change, logarithmic beyond, to the end of the run (``solution.t``, stated in the axis
    label), so that intervals of very different lengths all show.

    Arguments:
        solution: a single-trajectory :class:`gflow.Solution`.
        ax: a Matplotlib axis (a new figure if None).
        layer: hidden layer.
        legend: draw the legend (outside the axis, on its right).

    Returns:
        The axis.
    """
    solution = _single(solution)
    regions = solution.regions(layer)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 1.2 + 0.5 * len(regions)))
    t_end = max(float(solution.t), 1e-12)
    changes = [iv.t_start for nr in regions for iv in nr.intervals if iv.t_start > 0]
    if changes:
        linthresh = 10.0 ** np.floor(np.log10(max(min(changes), 1e-6 * t_end)))
        ax.set_xscale("symlog", linthresh=linthresh, linscale=1.0)
        decades = linthresh * 10.0 ** np.arange(int(np.floor(np.log10(t_end / linthresh) + 1e-9)) + 1)
        stride = -(-len(decades) // 6)  # at most 6 decade ticks besides 0
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([0.0, *decades[::stride]]))
        what = f"linear up to {linthresh:g}, log beyond"
    else:
        what = "linear"
    ax.set_xlim(0, t_end)
    scale = ax.xaxis.get_transform()  # data → scaled coordinates (log10 beyond linthresh)
    u0, u1 = scale.transform([0.0, t_end])
    others, shown = {}, {}
    for nr in regions:
        for iv in nr.intervals:
            style = _region_style(iv.label, others)
            shown[iv.label] = style
            width = max(iv.t_end - iv.t_start, 0.0)
            bar = ax.barh(nr.neuron, width, left=iv.t_start, height=0.6, lw=0.8, **style)
            bar.patches[0].set_gid(f"region:{iv.label}")
            a, b = scale.transform([iv.t_start, min(iv.t_end, t_end)])
            if (b - a) >= 0.2 * (u1 - u0):
                mid = scale.inverted().transform([(a + b) / 2])[0]
                ax.text(mid, nr.neuron, iv.label, ha="center", va="center", fontsize=8,
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))  # fmt: skip
    ax.set_yticks(range(len(regions)), [f"neuron {nr.neuron + 1}" for nr in regions])
    for label, nr in zip(ax.get_yticklabels(), regions):  # the colours of w_j(t) in plot_trajectory
        label.set_color(_NEURON_COLOURS[nr.neuron % len(_NEURON_COLOURS)])
    ax.set_ylim(len(regions) - 0.5, -0.5)  # neuron 1 on top
    ax.set_xlabel(f"t ({what}; the run ends at t = {t_end:g})")
    ax.set_title("region of each neuron over time")
    if legend and shown:
        handles = [
            matplotlib.patches.Patch(label=_legend_name(k), lw=0.8, **shown[k])
            for k in sorted(shown, key=_legend_order)
        ]
        ax.legend(handles=handles, title="region", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  fontsize=8, title_fontsize=8, handlelength=2.2, handleheight=1.2)  # fmt: skip
    return ax


def plot_loss_and_singular_values(solution, X, Y, axes=None):
    """``L(t)`` and the singular values of ``W(t)`` (first layer) against ``t``, log axes,
    with the kink events as dotted vertical lines.

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
    cr = solution.crossings
    times = [float(cr.t[e]) for e in range(int(cr.count)) if cr.t[e] > 0]
    for k, t in enumerate(times):
        for ax in axes:
            ax.axvline(t, color="crimson", lw=0.6, ls=":", label="kink events" if k == 0 else None)
    if times:
        ax_l.set_title("loss (dotted: kink events)")
    ax_s.legend()
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
