"""Matplotlib figures for trajectories in the paper's two-point setting."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_cones"]

_COLOURS = {"D": "#d9d9d9", "S": "#c6dbef", "S1": "#fdd0a2", "S2": "#c7e9c0"}


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
    r = radius or 1.15 * max(1.0, float(np.max(np.abs(np.concatenate(pts)))))
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
        ax.annotate("", xy=x, xytext=(0, 0), arrowprops=dict(arrowstyle="->", lw=1.5))
        ax.text(*(1.08 * x), f"$x_{i + 1}$", ha="center")
    if trajectories is not None:
        T = np.asarray(trajectories)
        for j in range(T.shape[1]):
            ax.plot(T[:, j, 0], T[:, j, 1], lw=1.8, label=f"$w_{j + 1}(t)$")
            ax.plot(*T[0, j], "o", color="k", ms=4)
            ax.plot(*T[-1, j], "*", color="k", ms=9)
        ax.legend(loc="lower right")
    if crossings is not None:
        for w in crossings:
            ax.plot(*w, "x", color="crimson", ms=8, mew=2)
    ax.set_xlim(-r, r)
    ax.set_ylim(-r, r)
    ax.set_aspect("equal")
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    return ax
