"""The decision at a kink (gflow.sliding.complementarity) on its own, without the
integrator: states built in NumPy with several units exactly on their surfaces (in
several layers and at one point across layers, where the field is multi-affine in the
slopes), solved by the engine, then checked with the reference's independent NumPy
backward and forward passes and Wolfe's min-norm point (gflow.reference)."""

import functools
import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gflow import events, kinks, sliding
from gflow.flow import _unravel_for
from gflow.reference import (
    _entries_to_layers,
    _Layout,
    _min_norm_sum,
    _output_gradient,
    _surface_forward,
    _tangent_preactivations,
    _vertex_gradients,
    balance_invariants,
    preactivations,
)

WIDTHS, N, SLOTS = (3, 4, 4, 1), 5, 12
SHAPES = [(o, i) for i, o in zip(WIDTHS[:-1], WIDTHS[1:])]
LAYOUT = _Layout(SHAPES, N)


def surface_state(seed, widths=WIDTHS):
    """Random weights, inputs and targets, with 3–6 units (more in deeper ``widths``) put
    exactly on their surfaces: each chosen unit's incoming weight row is projected off the
    inputs it receives at its chosen points, layer by layer from the bottom (at most two
    points per neuron, fewer than its fan-in). Returns ``(params, X, Y, on)``, ``on`` the flat indices on their
    surfaces (only those whose point still carries some activation from below)."""
    rng = np.random.default_rng(seed)
    shapes = [(o, i) for i, o in zip(widths[:-1], widths[1:])]
    offsets = _Layout(shapes, N).entry_offsets
    params = [rng.normal(size=s) * np.sqrt(2.0 / s[1]) for s in shapes]
    X = rng.normal(size=(N, widths[0]))
    Y = rng.normal(size=(N, widths[-1]))
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
            on += [int(offsets[layer] + j * N + i) for i in points if np.any(h[i] != 0.0)]
        h = np.maximum(h @ W.T, 0.0)
    return params, X, Y, sorted(on)


def numpy_field(params, X, Y, slopes, K, layout=LAYOUT, on_surface=True):
    """The reference's gradient with slopes ``slopes`` (flat ``(P,)``; the units ``K``
    output 0, or with ``on_surface`` false their slope times their pre-activation), and
    every unit's rate under ``−g``."""
    base = np.asarray(slopes, float).copy()
    if on_surface:
        base[K] = 0.0
    hmasks = _entries_to_layers(layout, base)
    _, H, F = _surface_forward(params, X, hmasks)
    gmasks = _entries_to_layers(layout, np.asarray(slopes, float)[None])
    g = _vertex_gradients(params, H, gmasks, _output_gradient(F, Y, "square"), 0.0)[0]
    offsets = layout.param_offsets
    velocity = [-g[o:e].reshape(s)[None] for o, e, s in zip(offsets[:-1], offsets[1:], layout.shapes)]
    rates = _tangent_preactivations(params, X, hmasks, gmasks, velocity)
    return g, np.concatenate([r[0].T.ravel() for r in rates])


def numpy_min_norm(params, X, Y, pattern, K, S, layout=LAYOUT):
    """Wolfe's min-norm point of the hull of the gradients over the vertices of the units
    ``S`` (the others of ``K`` at their slopes in ``pattern``)."""
    grads = []
    for bits in itertools.product((0.0, 1.0), repeat=len(S)):
        slopes = np.asarray(pattern, float).copy()
        slopes[S] = bits
        grads.append(numpy_field(params, X, Y, slopes, K, layout)[0])
    return _min_norm_sum([np.array(grads)])[0]


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
    """On 300 random states with 2–12 units on their surfaces the solve, from the box's
    centre, returns for every unit a consistent decision checked in NumPy: a unit that
    slides has its control in ``(0, 1)`` and its rate zeroed (to 1e-9 of the largest
    rate); one that leaves is at 0 or 1 with its rate pointing to that side. The field it
    gives, ``g(c)``, is Wolfe's min-norm point of the hull over the sliding units'
    vertices (the leaving ones at their sides) to 1e-9 relative: the velocity of the
    Filippov flow."""
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
    # Every state is solved (0.5.7 left seeds 56 and 195 unsolved from the box's centre:
    # complementarity's last two rounds solve them).
    assert not unsolved, unsolved


def test_coupled_sliding_units_are_solved_from_any_start():
    """Three units slide, two of them at one point in consecutive layers, so that their
    rates are quadratic in the controls: the state at ``t = 37.25`` of
    ``tests/test_deep.py::test_several_units_slide_on_their_surfaces``
    (``tests/data/quadratic_sliding.npz``: its weights and modes there). Newton's method
    on the rates from 0 finds a root outside the box (a control of 227.5), and from the
    box's centre the semismooth Newton iterations left the box and stopped at a
    non-solution (natural residual 0.045; the run continued from there stopped with
    ``KINK_UNRESOLVED``): the fourth round, the minimum of ``‖g‖²`` over the box from
    the start with every unit free, solves it. From every start the three units slide, with
    the same controls, in ``(0, 1)``, their rates zero in NumPy (the reference's passes, a
    held unit outputting its control times its pre-activation) and ``g`` Wolfe's min-norm
    point of the hull over their vertices."""
    z = np.load(Path(__file__).parent / "data" / "quadratic_sliding.npz")
    params, X, Y, modes = [z[f"arr_{i}"] for i in range(3)], z["X"], z["Y"], z["modes"]
    shapes = [W.shape for W in params]
    layout = _Layout(shapes, len(X))
    system = events.System(_unravel_for(tuple(shapes)), "square", len(X), (2, 2), 8)
    K = [int(k) for k in np.nonzero(modes == events.SLIDING)[0]]
    assert len(K) == 3 and len({layout.entry(k)[2] for k in K}) == 2  # two at one point
    y = jnp.asarray(np.concatenate([W.ravel() for W in params]))
    pattern = (modes == events.ACTIVE).astype(float)
    idx = jnp.asarray(K + [system.P] * 5)
    solve = jax.jit(
        lambda c0: sliding.complementarity(system, y, (X, Y, 0.0), jnp.asarray(pattern), idx, idx < system.P, c0)
    )
    controls = []
    for start in ([0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0], [0.0, 1.0, 0.5]):
        dec = solve(jnp.asarray(start + [0.0] * 5))
        c = np.asarray(dec.control)[:3]
        assert float(dec.residual) <= sliding.SOLVED and np.all(np.asarray(dec.slide)[:3]), (start, c)
        assert np.all((c > 0.0) & (c < 1.0)), (start, c)
        slopes = pattern.copy()
        slopes[K] = c
        g, rates = numpy_field(params, X, Y, slopes, K, layout, on_surface=False)
        assert np.max(np.abs(rates[K])) <= 1e-9 * np.max(np.abs(rates)), (start, rates[K])
        u = numpy_min_norm(params, X, Y, slopes, K, K, layout)
        assert np.linalg.norm(g - u) <= 1e-8 * np.linalg.norm(u), start
        controls.append(c)
    np.testing.assert_allclose(controls, np.broadcast_to(controls[0], (4, 3)), rtol=0, atol=1e-9)


@pytest.mark.quick
@pytest.mark.parametrize("n", [1, N])
def test_field_is_the_reference_gradient_with_weight_decay(n):
    """``System.field`` with fractional slopes and weight decay is the reference's NumPy
    gradient (its own forward and backward passes), 0 in the state's last entry (the
    energy integral); and, op by op, the very numbers of differentiating the objective
    through the state's slices, as the engine did before writing out the weight decay's
    gradient. One point: every product of the pass is written out (at most 16
    multiply-adds); five: each is a ``dot``."""
    from gflow.losses import objective

    rng = np.random.default_rng(n)
    params = [rng.normal(size=s) for s in SHAPES]
    X, Y = rng.normal(size=(n, WIDTHS[0])), rng.normal(size=(n, WIDTHS[-1]))
    layout = _Layout(SHAPES, n)
    slopes = rng.uniform(size=layout.entry_offsets[-1])
    y = np.append(np.concatenate([W.ravel() for W in params]), 2.5)
    system = events.System(_unravel_for(SHAPES), "square", n, WIDTHS[1:-1], SLOTS)
    f = np.asarray(system.field(jnp.asarray(y), (X, Y, 0.3), jnp.asarray(slopes)))
    _, H, F = _surface_forward(params, X, _entries_to_layers(layout, slopes))
    g = _vertex_gradients(params, H, _entries_to_layers(layout, slopes[None]), _output_gradient(F, Y, "square"), 0.3)[0]
    np.testing.assert_allclose(f[:-1], -g, rtol=1e-12, atol=1e-12)
    assert f[-1] == 0.0
    through_slices = jax.grad(
        lambda y: objective("square")(system.unravel(y), X, Y, 0.3, system._slope_list(jnp.asarray(slopes)))
    )(jnp.asarray(y))
    assert np.array_equal(f, -np.asarray(through_slices))


def test_output_round_off_is_the_regression_losses_cancellation():
    """``System.output_round_off`` (the coupled round's round-off of the rates) against
    NumPy: ``ε·‖|out| + |Y|‖ / ‖out − Y‖``, with the network's output from a plain NumPy
    forward pass; 1 (the whole field is round-off) where the targets are the outputs."""
    system, _ = engine()
    params, X, Y, _ = surface_state(0)
    y = jnp.asarray(np.concatenate([W.ravel() for W in params]))
    h = X
    for W in params[:-1]:
        h = np.maximum(h @ W.T, 0.0)
    out = h @ params[-1].T
    expected = np.finfo(float).eps * np.linalg.norm(np.abs(out) + np.abs(Y)) / np.linalg.norm(out - Y)
    assert float(system.output_round_off(y, (X, Y, 0.0))) == pytest.approx(expected, rel=1e-12)
    assert float(system.output_round_off(y, (X, out, 0.0))) == 1.0


@pytest.mark.quick
def test_quasi_newton_controls_recover_from_a_step_that_fails_to_halve_the_rates():
    """``_chord`` starts from the inverse Jacobian of another state (the step's start).
    Where its first step fails to halve the rates (checked here in NumPy), it must not stop
    there (before 0.5.9 it did, and sliding units drifted off their surfaces): the failed
    step's secant pair updates the inverse and the step is taken again. On linear rates
    ``A·c − b`` from 40 mismatched inverses ``(A + E)⁻¹`` it must reach ``A⁻¹b`` (LAPACK)
    to 1e-12, the rates at ``_NEWTON_TOL`` of their scale."""
    solve = jax.jit(lambda A, b, inverse, scale, c: sliding._chord(lambda c: A @ c - b, inverse, scale, c))
    failed_first = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        A = rng.normal(size=(4, 4)) + 3.0 * np.eye(4)
        b, E, c0 = rng.normal(size=4), rng.normal(size=(4, 4)), np.full(4, 0.5)
        inverse = np.linalg.inv(A + E)
        r0 = A @ c0 - b
        failed_first += np.abs(A @ (c0 - inverse @ r0) - b).max() > 0.5 * np.abs(r0).max()
        scale = np.abs(A).max()
        c, res = solve(A, b, inverse, scale, c0)
        np.testing.assert_allclose(np.asarray(c), np.linalg.solve(A, b), rtol=0, atol=1e-12)
        assert float(res) <= sliding._NEWTON_TOL * scale
    assert failed_first >= 20  # the case this is about, in most of them


@pytest.mark.quick
def test_small_solves_looped_and_written_out_agree_to_the_bit(monkeypatch):
    """``_solve_small`` above ``_UNROLL_COLUMNS`` columns loops over them (the program
    does not grow with the slot count); written out or looped it must be the same
    elimination: bit-identical results, and both ``A⁻¹b`` to round-off against LAPACK
    (NumPy), for one and for several right-hand sides, under ``vmap``."""
    rng = np.random.default_rng(3)
    for n in (6, 13):
        A = rng.normal(size=(5, n, n)) + 0.1 * np.eye(n)
        for b in (rng.normal(size=(5, n)), rng.normal(size=(5, n, 3))):
            solve = jax.jit(jax.vmap(sliding._solve_small))
            looped = np.asarray(solve(A, b))
            monkeypatch.setattr(sliding, "_UNROLL_COLUMNS", n)
            written = np.asarray(jax.jit(jax.vmap(sliding._solve_small))(A, b))
            monkeypatch.undo()
            assert np.array_equal(looped, written)
            expected = np.linalg.solve(A, b if b.ndim == 3 else b[..., None])
            np.testing.assert_allclose(looped, expected if b.ndim == 3 else expected[..., 0], rtol=1e-10, atol=1e-11)


def test_a_unit_whose_own_slide_is_unstable_is_held_by_the_units_coupled_to_it():
    """The state at which the 20-point Scale run (``benchmarks.deep_scale``: depth 10,
    width 20) stopped with ``KINK_UNRESOLVED`` before the coupled round
    (``tests/data/scale_kink.npz``: its weights at ``t = 17.649`` and the modes then):
    25 units slide and two inactive ones reach their surfaces (``|p| ≤ 1e-10``), at loss
    2e-19. One sliding unit's rate grows with its own slope (``d > 0``, measured here),
    which the unit-by-unit rule does not let slide. The decision is solved and checked in
    NumPy (the reference's passes, with the engine's field between surfaces: a held unit
    outputs its control times its pre-activation, here up to 2.2e-10): every unit that
    slides has its control in ``(0, 1)`` and its rate at most 1e-2 of its one-sided rates
    (the field keeps about five digits here, ``out − Y`` being 1e-10 of ``Y``, and a
    unit's one-sided rates are as small as 3e-12), every other unit's rate points to its
    side within that, and the sliding set is stable: every eigenvalue of its Jacobian
    ``∂ṗ/∂c`` (central differences; the rates are affine in each control) has a negative
    real part."""
    z = np.load(Path(__file__).parent / "data" / "scale_kink.npz")
    params, X, Y, modes = [z[f"arr_{i}"] for i in range(10)], z["X"], z["Y"], z["modes"]
    shapes = [W.shape for W in params]
    layout = _Layout(shapes, len(X))
    system = events.System(_unravel_for(tuple(shapes)), "square", len(X), tuple(s[0] for s in shapes[:-1]), 32)
    pattern = (modes == events.ACTIVE).astype(float)
    p = np.concatenate([a.ravel() for a in preactivations(params, X)])
    sliding_now = np.nonzero(modes == events.SLIDING)[0]
    arriving = np.nonzero((modes == events.INACTIVE) & (np.abs(p) <= 1e-10))[0]
    assert len(sliding_now) == 25 and len(arriving) == 2 and np.max(np.abs(p[sliding_now])) <= 3e-10
    K = [int(k) for k in np.concatenate([sliding_now, arriving])]
    y = np.concatenate([W.ravel() for W in params])
    idx = np.array(K + [system.P] * (32 - len(K)))
    valid = idx < system.P
    _, control = system.equivalent_control(jnp.asarray(y), (X, Y, 0.0), jnp.asarray(modes), jnp.full(system.P, 0.5))
    c0 = np.where(np.isin(idx, arriving), 0.0, np.append(np.asarray(control), 0.0)[idx])
    dec = jax.jit(
        lambda y, c0: sliding.complementarity(
            system, y, (X, Y, 0.0), jnp.asarray(pattern), jnp.asarray(idx), jnp.asarray(valid), c0,
            hold=jnp.asarray(np.isin(idx, arriving)),
        )
    )(jnp.asarray(y), jnp.asarray(c0))  # fmt: skip
    assert float(dec.residual) <= sliding.SOLVED
    n = len(K)
    c, slide, up = (np.asarray(a)[:n] for a in (dec.control, dec.slide, dec.up))
    slopes = pattern.copy()
    slopes[K] = c

    def rates(values):
        return numpy_field(params, X, Y, values, K, layout, on_surface=False)[1][K]

    r = rates(slopes)
    own = []
    for a in range(n):
        sides = [rates(np.where(np.arange(len(slopes)) == K[a], v, slopes))[a] for v in (0.0, 1.0)]
        own.append(sides[1] - sides[0])
        size = abs(sides[0]) + abs(sides[1])
        if slide[a]:
            assert 0.0 < c[a] < 1.0 and abs(r[a]) <= 1e-2 * size, (K[a], c[a], r[a], sides)
        elif up[a]:
            assert c[a] == 1.0 and r[a] >= -1e-2 * size, (K[a], r[a], sides)
        else:
            assert c[a] == 0.0 and r[a] <= 1e-2 * size, (K[a], r[a], sides)
    S = np.nonzero(slide)[0]
    assert any(own[a] > 0.0 for a in S), "no sliding unit with d > 0: the case is not exercised"
    J = np.empty((len(S), len(S)))
    for j, b in enumerate(S):
        plus, minus = slopes.copy(), slopes.copy()
        plus[K[b]] += 0.1
        minus[K[b]] -= 0.1
        J[:, j] = (rates(plus) - rates(minus))[S] / 0.2
    assert np.max(np.linalg.eigvals(J).real) < 0.0, np.linalg.eigvals(J)


@pytest.mark.parametrize("seed, widths", [(0, WIDTHS), (1, WIDTHS), (2, WIDTHS), (3, (3, 4, 4, 4, 4, 1))])
def test_sliding_units_are_put_on_their_surfaces_by_the_least_balanced_change(seed, widths):
    """``kinks.onto_surfaces`` against NumPy: from a state of ``surface_state`` moved off
    by 1e-7 (a round-off band of the default tolerances), the sliding units' pre-activations
    are back at round-off and the balance invariants of SPEC §3 unchanged to second order;
    each layer's change is the minimum-norm solution (``numpy.linalg.lstsq``) of the
    constraints written out over its entries: ``Δ_j·h_i = −p_ji`` at the sliding units,
    ``W_j·Δ_j = 0`` per row, ``Σ_j W_jk Δ_jk = 0`` per column above the first layer, the
    inputs ``h`` from the moved layers below with the modes' slopes. Nothing moves with the
    floor above every ``|p|``. Depth 5: three square layers above the first, which the
    engine moves in one loop."""
    shapes = [(o, i) for i, o in zip(widths[:-1], widths[1:])]
    layout = _Layout(shapes, N)
    system = engine()[0] if widths == WIDTHS else events.System(_unravel_for(shapes), "square", N, widths[1:-1], SLOTS)
    params, X, Y, on = surface_state(seed, widths)
    rng = np.random.default_rng(100 + seed)
    params = [W + 1e-7 * rng.normal(size=W.shape) for W in params]
    pre = np.concatenate([p.ravel() for p in preactivations(params, X)])
    mode = np.where(pre > 0, events.ACTIVE, events.INACTIVE).astype(np.int8)
    mode[on] = events.SLIDING
    control = np.where(mode == events.SLIDING, rng.uniform(0.1, 0.9, size=mode.shape), 0.0)
    y = np.append(np.concatenate([W.ravel() for W in params]), 2.5)
    onto = jax.jit(functools.partial(kinks.onto_surfaces, system))
    state = (jnp.asarray(y), (X, Y, 0.0), jnp.asarray(mode), jnp.asarray(control))
    assert np.array_equal(onto(*state, 1.0), y)
    moved = np.asarray(onto(*state, 1e-12))
    assert moved[-1] == 2.5
    got = layout.unflatten(moved[:-1])
    assert np.array_equal(got[-1], params[-1])
    assert max(abs(pre[on])) >= 1e-8
    after = np.concatenate([p.ravel() for p in preactivations(got, X)])
    assert np.max(np.abs(after[on])) <= 1e-15
    # Each invariant moves by exactly its neuron's ‖Δ_row‖² − ‖Δ_column‖² (the first-order
    # terms are the constraints), which the depth-5 state makes larger than 1e-13.
    change = balance_invariants(got) - balance_invariants(params)
    second = np.concatenate(
        [np.sum((got[k] - params[k]) ** 2, axis=1) - np.sum((got[k + 1] - params[k + 1]) ** 2, axis=0)
         for k in range(len(params) - 1)]
    )  # fmt: skip
    assert np.max(np.abs(change - second)) <= 1e-13
    if widths == WIDTHS:
        assert np.max(np.abs(change)) <= 1e-13
    h = X
    for layer, W in enumerate(params[:-1]):
        d, a = W.shape
        base = layout.entry_offsets[layer]
        rows, rhs = [], []
        for j, i in [divmod(k - base, N) for k in on if base <= k < layout.entry_offsets[layer + 1]]:
            rows.append(np.kron(np.eye(d)[j], h[i]))
            rhs.append(-(W[j] @ h[i]))
        for j in range(d):
            rows.append(np.kron(np.eye(d)[j], W[j]))
            rhs.append(0.0)
        for k in range(a if layer else 0):
            rows.append(np.kron(W[:, k], np.eye(a)[k]))
            rhs.append(0.0)
        step = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0].reshape(d, a)
        np.testing.assert_allclose(got[layer] - W, step, rtol=0, atol=1e-13)
        slopes = np.where(mode == events.ACTIVE, 1.0, control)[base : layout.entry_offsets[layer + 1]]
        h = slopes.reshape(d, N).T * (h @ got[layer].T)


@pytest.mark.quick
def test_stacked_blocks_put_each_unit_at_its_layer_neuron_and_point():
    """The all-layers view of the twin and cut masks (:func:`gflow.networks.stacked_blocks`)
    holds each flat entry at its ``(layer, neuron, point)`` of
    :func:`gflow.networks.index_table`, padding elsewhere, and :func:`flat_blocks` undoes
    it; :func:`per_unit` gives each unit its layer's and point's entry. Mixed widths (a
    gather) and one width (a reshape)."""
    from gflow.networks import flat_blocks, index_table, per_unit, stacked_blocks

    for n, widths in [(3, (2, 4, 1)), (2, (3, 3))]:
        P = n * sum(widths)
        flat = jnp.arange(1.0, P + 1)
        stacked = np.asarray(stacked_blocks(flat, n, widths, -1.0))
        layer, neuron, point = index_table(n, widths)
        assert stacked.shape == (len(widths), max(widths), n)
        np.testing.assert_array_equal(stacked[layer, neuron, point], np.arange(1.0, P + 1))
        assert np.sum(stacked == -1.0) == stacked.size - P
        np.testing.assert_array_equal(np.asarray(flat_blocks(jnp.asarray(stacked), n, widths)), np.asarray(flat))
        rows = np.arange(len(widths) * n).reshape(len(widths), n)
        np.testing.assert_array_equal(np.asarray(per_unit(jnp.asarray(rows), n, widths)), rows[layer, point])


@pytest.mark.quick
def test_twins_are_read_off_the_modes():
    """Units of one neuron are twins (one surface, :mod:`gflow.twins`) at two points whose
    layer input is one live unit, the same, of the layer below, or the same live units
    fed by twin inputs; the class is carried by its unit at the lowest point."""
    from gflow import twins
    from gflow.events import ACTIVE, INACTIVE, SLIDING

    n, widths = 4, (2, 3, 2)
    first = np.array([[1, 1, 1, 0], [0, 0, 1, 1]])  # [neuron, point]: points 0, 1 share unit 0
    second = np.array([[1, 1, 1, 1], [1, 1, 0, 1], [2, 2, 1, 0]])  # two live units at 0 and 1
    third = np.array([[2, 2, 0, 0], [0, 0, 1, 1]])
    mode = jnp.asarray(np.concatenate([first.ravel(), second.ravel(), third.ravel()]))
    pairs = np.asarray(twins.shared(n, widths, mode))
    assert not pairs[0].any()  # the data are never read
    assert {tuple(p) for p in np.argwhere(pairs[1])} == {(0, 1), (1, 0)}
    # The third layer: the same two live units at points 0 and 1, fed by twin inputs;
    # points 1 and 3 have the same live units too, but their inputs are not twins.
    assert {tuple(p) for p in np.argwhere(pairs[2])} == {(0, 1), (1, 0)}
    parted = mode.at[8 + 4 + 0].set(INACTIVE)  # (1, 1, 0) inactive: point 0 has one live unit
    assert not np.asarray(twins.shared(n, widths, parted))[2].any()
    moved = mode.at[1].set(INACTIVE).at[5].set(ACTIVE)  # point 1 fed by first-layer unit 1, as 3
    assert {tuple(p) for p in np.argwhere(np.asarray(twins.shared(n, widths, moved))[1])} == {(1, 3), (3, 1)}
    # Sliding units: (1, 2, 0) and (1, 2, 1) are a class, and so are (2, 0, 0), (2, 0, 1).
    riders = np.asarray(twins.passengers(n, widths, twins.shared(n, widths, mode), mode == SLIDING))
    assert np.flatnonzero(riders).tolist() == [8 + 8 + 1, 20 + 1]
    grown = np.asarray(twins.with_twins(n, widths, pairs, jnp.zeros(28, bool).at[20 + 4 + 1].set(True)))
    assert np.flatnonzero(grown).tolist() == [20 + 4 + 0, 20 + 4 + 1]  # (2, 1, 1) and its twin (2, 1, 0)
    system = events.System(None, "square", n, widths, 4)
    idx = jnp.asarray([16, 17, 21, 28])  # (1, 2, 0), (1, 2, 1), (2, 0, 1), an empty slot
    tie = np.asarray(twins.ties(system, idx, idx < 28, twins.shared(n, widths, mode), mode == SLIDING))
    assert tie.tolist() == [0, 0, 2, 3]  # (2, 0, 1)'s carrier (2, 0, 0) is not in the slots


def test_a_landing_that_makes_an_arriving_unit_a_twin_is_read_off_the_modes():
    """A live unit within its band whose landing makes an arriving unit the twin of a
    sliding one lands with it (:func:`gflow.twins.landing`); near units whose landing
    makes no such pair do not."""
    from gflow import twins
    from gflow.events import INACTIVE, SLIDING

    n, widths = 4, (2, 3)
    first = np.array([[1, 1, 1, 1], [0, 1, 0, 0]])  # point 1 has two live units, the others one
    second = np.array([[0, 0, 0, SLIDING], [0, 0, 0, 0], [0, 0, 0, 0]])
    mode = jnp.asarray(np.concatenate([first.ravel(), second.ravel()]))
    pending = jnp.zeros(20, bool).at[8 + 1].set(True)  # (1, 0, 1) arrives; (1, 0, 3) slides
    near = jnp.zeros(20, bool).at[4 + 1].set(True).at[2].set(True)  # (0, 1, 1) and (0, 0, 2)
    landing = np.asarray(twins.landing(n, widths, mode, pending, near))
    assert np.flatnonzero(landing).tolist() == [4 + 1]  # point 1 then has one live unit, as 3
    assert not np.asarray(twins.landing(n, widths, mode.at[8 + 3].set(INACTIVE), pending, near)).any()
    assert not np.asarray(twins.landing(n, widths, mode, jnp.zeros(20, bool), near)).any()


def test_an_arriving_unit_whose_twin_is_off_its_surface_takes_its_twins_side():
    """Twins are positive multiples of each other: a unit within its band whose twin is
    clearly off its surface has not arrived (:func:`gflow.twins.astray`)."""
    from gflow import twins

    n, widths = 3, (2, 2)
    first = np.array([[1, 1, 1], [0, 0, 1]])  # points 0 and 1: one live unit, the same
    mode = jnp.asarray(np.concatenate([first.ravel(), np.zeros(6, int)]))
    pairs = twins.shared(n, widths, mode)
    p = jnp.asarray(np.concatenate([np.ones(6), [6.5e-9, 1e-3, 0.2, -2e-9, -0.3, 0.1]]))
    pending = jnp.zeros(12, bool).at[6 + 0].set(True).at[6 + 3].set(True)  # (1, 0, 0) and (1, 1, 0)
    off = ~pending & (jnp.abs(p) > 1e-8)
    astray, up = (np.asarray(a) for a in twins.astray(n, widths, pairs, pending, off, p))
    assert np.flatnonzero(astray).tolist() == [6 + 0, 6 + 3]  # their twins at point 1
    assert up[6 + 0] and not up[6 + 3]  # (1, 0, 1) at +1e-3: active; (1, 1, 1) at −0.3: inactive
    # Point 2 is no twin of point 0 (two live units there): its units do not count.
    assert not np.asarray(twins.astray(n, widths, pairs, pending, off & (jnp.arange(12) != 7), p)[0])[6]
