"""The decision at a kink (gflow.sliding.complementarity) on its own, without the
integrator: states built in NumPy with several units exactly on their surfaces (in
several layers and at one point across layers, where the field is multi-affine in the
slopes), solved by the engine, then checked with the reference's independent NumPy
backward and forward passes and Wolfe's min-norm point (gflow.reference)."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import events, sliding
from gflow.flow import _unravel_for
from gflow.reference import (
    _entries_to_layers,
    _Layout,
    _min_norm_point,
    _output_gradient,
    _surface_forward,
    _tangent_preactivations,
    _vertex_gradients,
)

WIDTHS, N, SLOTS = (3, 4, 4, 1), 5, 12
SHAPES = [(o, i) for i, o in zip(WIDTHS[:-1], WIDTHS[1:])]
LAYOUT = _Layout(SHAPES, N)


def surface_state(seed):
    """Random weights, inputs and targets, with 3–6 units put exactly on their surfaces:
    each chosen unit's incoming weight row is projected off the inputs it receives at its
    chosen points, layer by layer from the bottom (at most two points per neuron, fewer
    than its fan-in). Returns ``(params, X, Y, on)``, ``on`` the flat indices on their
    surfaces (only those whose point still carries some activation from below)."""
    rng = np.random.default_rng(seed)
    params = [rng.normal(size=s) * np.sqrt(2.0 / s[1]) for s in SHAPES]
    X = rng.normal(size=(N, WIDTHS[0]))
    Y = rng.normal(size=(N, WIDTHS[-1]))
    h, on = X, []
    for layer, W in enumerate(params[:-1]):
        for j in rng.choice(W.shape[0], size=rng.integers(1, 4), replace=False):
            points = rng.choice(N, size=rng.integers(1, 3), replace=False)
            basis = h[points]
            if np.linalg.norm(basis) == 0.0:
                continue
            # Remove the component of the row in the span of those inputs.
            q, _ = np.linalg.qr(basis.T)
            W[j] -= q @ (q.T @ W[j])
            on += [int(LAYOUT.entry_offsets[layer] + j * N + i) for i in points if np.any(h[i] != 0.0)]
        h = np.maximum(h @ W.T, 0.0)
    return params, X, Y, sorted(on)


def numpy_field(params, X, Y, slopes, K):
    """The reference's gradient with slopes ``slopes`` (flat ``(P,)``; the units ``K``
    output 0), and every unit's rate under ``−g``."""
    base = np.asarray(slopes, float).copy()
    base[K] = 0.0
    hmasks = _entries_to_layers(LAYOUT, base)
    _, H, F = _surface_forward(params, X, hmasks)
    gmasks = _entries_to_layers(LAYOUT, np.asarray(slopes, float)[None])
    g = _vertex_gradients(params, H, gmasks, _output_gradient(F, Y, "square"), 0.0)[0]
    velocity = [
        -g[o:e].reshape(s)[None] for o, e, s in zip(LAYOUT.param_offsets[:-1], LAYOUT.param_offsets[1:], SHAPES)
    ]
    rates = _tangent_preactivations(params, X, hmasks, gmasks, velocity)
    return g, np.concatenate([r[0].T.ravel() for r in rates])


def numpy_min_norm(params, X, Y, pattern, K, S):
    """Wolfe's min-norm point of the hull of the gradients over the vertices of the units
    ``S`` (the others of ``K`` at their slopes in ``pattern``)."""
    grads = []
    for bits in itertools.product((0.0, 1.0), repeat=len(S)):
        slopes = np.asarray(pattern, float).copy()
        slopes[S] = bits
        grads.append(numpy_field(params, X, Y, slopes, K)[0])
    return _min_norm_point(np.array(grads))[0]


@functools.lru_cache(maxsize=1)
def engine():
    """The engine's System for the shape, and its complementarity solve, jitted once."""
    system = events.System(_unravel_for(SHAPES), "square", N, WIDTHS[1:-1], SLOTS)

    @jax.jit
    def solve(y, X, Y, base, idx, c0):
        return sliding.complementarity(system, y, (X, Y, 0.0), base, idx, idx < system.P, c0)

    return system, solve


SEEDS = range(300)


@pytest.mark.quick
def test_kink_decisions_are_consistent_and_min_norm():
    """On 300 random states with 2–12 units on their surfaces the solve returns, for every
    unit, a consistent decision checked in NumPy: a unit that slides has its control in
    ``(0, 1)`` and its rate zeroed (to 1e-9 of the largest rate); one that leaves is at 0
    or 1 with its rate pointing to that side. The field it gives, ``g(c)``, is Wolfe's
    min-norm point of the hull over the sliding units' vertices (the leaving ones at
    their sides) to 1e-9 relative: the velocity of the Filippov flow."""
    system, solve = engine()
    counts = dict(two=0, three=0, across_layers=0, leaves=0)
    unsolved = []
    for seed in SEEDS:
        params, X, Y, K = surface_state(seed)
        assert 2 <= len(K) <= SLOTS, (seed, K)
        y = np.concatenate([W.ravel() for W in params])
        p = np.asarray(system.preacts(jnp.asarray(y), (X, Y, 0.0)))
        assert np.max(np.abs(p[K])) <= 1e-13
        pattern = (p > 0).astype(float)
        pattern[K] = 0.0
        idx = np.array(K + [system.P] * (SLOTS - len(K)))
        c0 = np.where(idx < system.P, 0.5, 0.0)
        dec = solve(jnp.asarray(y), X, Y, jnp.asarray(pattern), jnp.asarray(idx), jnp.asarray(c0))
        n = len(K)
        c, slide, up = (np.asarray(a)[:n] for a in (dec.control, dec.slide, dec.up))
        if float(dec.residual) > 1e-6:  # reported unsolved: the engine stops the member
            unsolved.append(seed)
            continue
        slopes = pattern.copy()
        slopes[K] = c
        g, rates = numpy_field(params, X, Y, slopes, K)
        r = rates[K]
        scale = np.max(np.abs(rates))
        for a in range(n):
            # A unit that leaves may do so with a rate against its side of at most
            # sliding.SOLVED controls' worth (a control within SOLVED of its bound is
            # taken as the bound), its own sensitivity d measured here.
            sides = [
                numpy_field(params, X, Y, np.where(np.arange(len(slopes)) == K[a], v, slopes), K)[1][K[a]]
                for v in (0.0, 1.0)
            ]
            slack = sliding.SOLVED * abs(sides[1] - sides[0]) + 1e-9 * scale
            if slide[a]:
                assert 0.0 < c[a] < 1.0 and abs(r[a]) <= 1e-9 * scale, (seed, a, c[a], r[a])
            elif up[a]:
                assert c[a] == 1.0 and r[a] >= -slack, (seed, a, r[a])
            else:
                assert c[a] == 0.0 and r[a] <= slack, (seed, a, r[a])
        S = [k for k, s in zip(K, slide, strict=True) if s]
        u = numpy_min_norm(params, X, Y, slopes, K, S)
        assert np.linalg.norm(g - u) <= 1e-9 * np.linalg.norm(u), seed
        counts["two"] += len(S) >= 2
        counts["three"] += len(S) >= 3
        counts["leaves"] += int((~slide).sum())
        # Two sliding units at one point in different layers: the field is bilinear in them.
        counts["across_layers"] += len(S) > len({LAYOUT.entry(k)[2] for k in S})
    # The states exercise sliding sets of several units, at one point across layers, and
    # units that leave.
    assert counts["two"] >= 22 and counts["three"] >= 3 and counts["across_layers"] >= 6, counts
    assert counts["leaves"] >= 300, counts
    print(counts, unsolved)
    assert len(unsolved) <= 3, unsolved
