"""Tests of the deep-network part of gflow.theory (Theorems 4 and 5, SPEC §5).

Everything is checked against values computed another way: networks are evaluated with
a plain NumPy forward written here (and once with ``gflow.networks.forward``), norms and
ratios with ``np.linalg.norm``, the constructions' layer norms with the proofs' formulas
for ``α`` and ``β`` written out here, and the closed-form bounds against the norm of the
constructed network itself. The inequality chain behind both bounds is checked step by
step on random deep networks.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from gflow.networks import forward
from gflow.theory import (
    check_theorem4_assumptions,
    check_theorem5_assumptions,
    layer_ratios,
    ratio_summary,
    rebalance,
    shallow_B,
    teacher_data,
    theorem4_bound,
    theorem4_network,
    theorem4_norm_sq,
    theorem5_bound,
    theorem5_network,
    theorem5_norm_sq,
)

pytestmark = pytest.mark.quick  # the whole file is in the fast tier (tests/run.py --quick)

SHALLOW = [(3, 1), (3, 4, 1), (5, 6, 4, 1), (2, 2, 2, 2, 1)]
EXTRA_DEPTH = [1, 2, 5, 17]


# --------------------------------------------------------------- independent helpers


def net(params, X):
    """``N(x_i)`` for each row of ``X`` with plain NumPy: shape ``(n, d_k)``."""
    h = np.asarray(X)
    for W in params[:-1]:
        h = np.maximum(h @ np.asarray(W).T, 0.0)
    return h @ np.asarray(params[-1]).T


def random_net(rng, widths):
    return [rng.standard_normal((fo, fi)) / np.sqrt(fi) for fi, fo in zip(widths[:-1], widths[1:])]


def fro(W):
    return float(np.linalg.norm(W, "fro"))


def spec(W):
    return float(np.linalg.norm(W, 2))


def unit_rows(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def assert_outputs_close(a, b):
    scale = max(1.0, float(np.max(np.abs(b))))
    assert np.max(np.abs(a - b)) <= 1e-12 * scale


# ------------------------------------------------------------------- constructions


@pytest.mark.parametrize("widths", SHALLOW)
@pytest.mark.parametrize("extra", EXTRA_DEPTH)
def test_theorem4_network_is_relu_of_shallow_net(widths, extra):
    rng = np.random.default_rng(extra * 100 + len(widths))
    params = random_net(rng, widths)
    k_prime = len(params) + extra
    X = rng.standard_normal((200, widths[0]))
    deep = theorem4_network(params, k_prime)
    assert len(deep) == k_prime
    # N' = σ(N) everywhere, hence N' = N on data with non-negative targets.
    assert_outputs_close(net(deep, X), np.maximum(net(params, X), 0.0))


@pytest.mark.parametrize("widths", SHALLOW)
@pytest.mark.parametrize("extra", EXTRA_DEPTH)
def test_theorem5_network_equals_shallow_net(widths, extra):
    rng = np.random.default_rng(extra * 100 + len(widths) + 7)
    params = random_net(rng, widths)
    k_prime = len(params) + extra
    X = rng.standard_normal((200, widths[0]))
    deep = theorem5_network(params, k_prime)
    assert len(deep) == k_prime
    out, ref = net(deep, X), net(params, X)
    assert_outputs_close(out, ref)
    y = np.sign(ref)
    assert np.all(np.sign(out) == y)  # same classification
    assert_outputs_close(y * out, y * ref)  # same margins


def test_constructions_with_gflow_forward():
    rng = np.random.default_rng(3)
    params = random_net(rng, (4, 5, 3, 1))
    X = rng.standard_normal((50, 4))
    for build, ref in [
        (theorem4_network, np.maximum(net(params, X), 0.0)),
        (theorem5_network, net(params, X)),
    ]:
        deep = build(params, 7)
        out, _ = forward([jnp.asarray(W) for W in deep], jnp.asarray(X))
        assert_outputs_close(np.asarray(out), ref)


@pytest.mark.parametrize("widths", SHALLOW)
@pytest.mark.parametrize("extra", EXTRA_DEPTH)
def test_theorem4_network_norms(widths, extra):
    rng = np.random.default_rng(extra + 31 * len(widths))
    params = random_net(rng, widths)
    k = len(params)
    k_prime = k + extra
    norms = [fro(W) for W in params]
    B = 1.3 * max(norms)
    alpha = (1 / B) ** ((k_prime - k) / k_prime)  # the proof's α and β
    beta = (1 / B) ** (-k / k_prime)
    deep = theorem4_network(params, k_prime, B=B)
    expected = [alpha * n for n in norms] + [beta] * (k_prime - k)
    np.testing.assert_allclose([fro(W) for W in deep], expected, rtol=1e-13)
    total = sum(fro(W) ** 2 for W in deep)
    np.testing.assert_allclose(total, alpha**2 * sum(n**2 for n in norms) + (k_prime - k) * beta**2, rtol=1e-13)
    assert total <= theorem4_norm_sq(k, k_prime, B) * (1 + 1e-13)
    assert max(fro(W) for W in deep) <= B ** (k / k_prime) * (1 + 1e-13)
    # Balanced N with norms B: every layer of N' has norm B^{k/k'} and the norm bound is attained.
    bal = rebalance(params)
    b = shallow_B(params)
    deep = theorem4_network(bal, k_prime)
    np.testing.assert_allclose([fro(W) for W in deep], b ** (k / k_prime), rtol=1e-12)
    np.testing.assert_allclose(sum(fro(W) ** 2 for W in deep), theorem4_norm_sq(k, k_prime, b), rtol=1e-12)


@pytest.mark.parametrize("widths", SHALLOW)
@pytest.mark.parametrize("extra", EXTRA_DEPTH)
def test_theorem5_network_norms(widths, extra):
    rng = np.random.default_rng(extra + 37 * len(widths))
    params = random_net(rng, widths)
    k = len(params)
    k_prime = k + extra
    norms = [fro(W) for W in params]
    B = 1.3 * max(norms)
    alpha = (np.sqrt(2) / B) ** ((k_prime - k) / k_prime)
    beta = (np.sqrt(2) / B) ** (-k / k_prime)
    deep = theorem5_network(params, k_prime, B=B)
    expected = [alpha * n for n in norms[:-1]] + [np.sqrt(2) * alpha * norms[-1]] + [np.sqrt(2) * beta] * (k_prime - k)
    np.testing.assert_allclose([fro(W) for W in deep], expected, rtol=1e-13)
    total = sum(fro(W) ** 2 for W in deep)
    assert total <= theorem5_norm_sq(k, k_prime, B) * (1 + 1e-13)
    bal = rebalance(params)
    b = shallow_B(params)
    deep = theorem5_network(bal, k_prime)
    np.testing.assert_allclose(sum(fro(W) ** 2 for W in deep), theorem5_norm_sq(k, k_prime, b), rtol=1e-12)
    # Shapes: hidden widths d_1..d_{k-1}, then 2, ..., 2; scalar output.
    assert [W.shape[0] for W in deep] == list(widths[1:-1]) + [2] * (k_prime - k) + [1]


@pytest.mark.parametrize("build", [theorem4_network, theorem5_network])
def test_width_padding_changes_nothing(build):
    rng = np.random.default_rng(5)
    params = random_net(rng, (3, 4, 2, 1))
    X = rng.standard_normal((40, 3))
    deep = build(params, 6)
    padded = build(params, 6, width=7)
    assert all(W.shape[0] == 7 for W in padded[:-1]) and padded[0].shape[1] == 3 and padded[-1].shape[0] == 1
    assert_outputs_close(net(padded, X), net(deep, X))
    np.testing.assert_allclose([fro(W) for W in padded], [fro(W) for W in deep], rtol=1e-15)
    np.testing.assert_allclose(layer_ratios(padded), layer_ratios(deep), rtol=1e-13)


# ------------------------------------------------------------------------- bounds


def test_bounds_by_hand():
    assert theorem4_bound(2, 4, 4.0) == pytest.approx(0.5, rel=1e-15)
    assert theorem4_bound(2, 4, 4.0, harmonic=True) == pytest.approx(2.0, rel=1e-15)
    assert theorem4_norm_sq(2, 4, 4.0) == pytest.approx(16.0, rel=1e-15)
    # (√2/B)^{k/k'} = (1/2)^{1/2}, √(k'/(2(k'+1))) = √(2/5): product √(1/5).
    B = 2 * np.sqrt(2)
    assert theorem5_bound(2, 4, B) == pytest.approx(np.sqrt(0.2), rel=1e-14)
    assert theorem5_bound(2, 4, B, harmonic=True) == pytest.approx(np.sqrt(5.0), rel=1e-14)
    assert theorem5_norm_sq(2, 4, B) == pytest.approx(20.0, rel=1e-14)
    np.testing.assert_allclose(theorem4_bound(np.array([1, 2]), 5, 2.0), [2 ** (-1 / 5), 2 ** (-2 / 5)], rtol=1e-15)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("B", [1.0, 1.7, 10.0])
def test_bound_limits(k, B):
    big = 10**10
    assert theorem4_bound(k, big, B) == pytest.approx(1.0, abs=1e-8)
    assert theorem5_bound(k, big, B) == pytest.approx(1 / np.sqrt(2), abs=1e-8)
    kp = np.arange(k + 1, k + 200)
    b4 = theorem4_bound(k, kp, B)
    assert np.all(b4 <= 1 + 1e-15) and np.all(np.diff(b4) >= 0)  # rises to 1
    assert np.all(theorem5_bound(k, kp, B) <= 1 + 1e-15)


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("extra", [1, 3, 30])
@pytest.mark.parametrize("B", [1.0, 2.5, 40.0])
def test_bounds_are_root_of_norm_bound(k, extra, B):
    """The last step of both proofs: bound = √(k'/max‖θ'‖²)."""
    kp = k + extra
    np.testing.assert_allclose(theorem4_bound(k, kp, B), np.sqrt(kp / theorem4_norm_sq(k, kp, B)), rtol=1e-14)
    np.testing.assert_allclose(theorem5_bound(k, kp, B), np.sqrt(kp / theorem5_norm_sq(k, kp, B)), rtol=1e-14)


@pytest.mark.parametrize("widths", SHALLOW)
@pytest.mark.parametrize("extra", EXTRA_DEPTH)
def test_bounds_from_constructed_norm(widths, extra):
    """For a balanced N with layer norms B, √(k'/‖θ'‖²) computed from the built θ' is the bound."""
    rng = np.random.default_rng(11 * extra + len(widths))
    params = rebalance(random_net(rng, widths))
    k = len(params)
    kp = k + extra
    B = max(1.0, shallow_B(params))
    params = [W * (B / fro(W)) for W in params]
    for build, bound in [(theorem4_network, theorem4_bound), (theorem5_network, theorem5_bound)]:
        deep = build(params, kp)
        np.testing.assert_allclose(np.sqrt(kp / sum(fro(W) ** 2 for W in deep)), bound(k, kp, B), rtol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_inequality_chain_on_random_deep_nets(seed):
    """Each step of the chain behind both bounds, on random nets scaled so max_i |N(x_i)| = 1 at unit x_i."""
    rng = np.random.default_rng(100 + seed)
    checked = 0
    for _ in range(40):
        kp = int(rng.integers(2, 9))
        widths = [3] + list(rng.integers(2, 7, size=kp - 1)) + [1]
        params = random_net(rng, widths)
        X = unit_rows(rng, 20, 3)
        top = np.max(np.abs(net(params, X)))
        if top == 0:
            continue
        params = [W * top ** (-1 / kp) for W in params]
        assert np.max(np.abs(net(params, X))) == pytest.approx(1.0, rel=1e-12)
        sig = np.array([spec(W) for W in params])
        F = np.array([fro(W) for W in params])
        r = sig / F
        assert np.prod(sig) >= 1 - 1e-12  # |N(x)| <= ‖x‖ Π‖W_j‖_σ
        assert np.mean(r) >= np.prod(r) ** (1 / kp) * (1 - 1e-12)  # AM-GM
        assert np.prod(r) ** (1 / kp) >= 1 / np.prod(F) ** (1 / kp) * (1 - 1e-12)
        assert 1 / shallow_B(params) == pytest.approx(1 / np.prod(F) ** (1 / kp), rel=1e-12)
        assert shallow_B(params) <= np.sqrt(np.sum(F**2) / kp) * (1 + 1e-12)  # geometric <= quadratic mean
        # So the bound holds for any feasible net in the theorem's norm ball, not only θ*.
        assert np.mean(r) >= np.sqrt(kp / np.sum(F**2)) * (1 - 1e-12)
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize("widths", SHALLOW)
@pytest.mark.parametrize("theorem", [4, 5])
def test_construction_on_teacher_data_meets_bound(widths, theorem):
    data = teacher_data(jax.random.PRNGKey(17 + len(widths)), 30, widths, theorem=theorem)
    k = len(widths) - 1
    build = theorem4_network if theorem == 4 else theorem5_network
    bound = theorem4_bound if theorem == 4 else theorem5_bound
    for kp in (k + 1, k + 4, 25):
        deep = build(data.params, kp)
        out = net(deep, data.X)
        if theorem == 4:
            assert_outputs_close(out, data.Y)  # interpolates
        else:
            assert np.min(data.Y * out) >= 1 - 1e-12  # margins ≥ 1
        mean_r = np.mean([spec(W) / fro(W) for W in deep])
        assert mean_r >= 1 / shallow_B(deep) * (1 - 1e-12) >= bound(k, kp, data.B) * (1 - 2e-12)
        if theorem == 5:
            # The sharper constant claimed in theorem5_bound's docstring, attained by the rebalanced θ'.
            sharp = 2 ** (-1 / (2 * kp)) / np.sqrt(2) * (np.sqrt(2) / data.B) ** (k / kp)
            assert 1 / shallow_B(deep) == pytest.approx(sharp, rel=1e-12)
            assert sharp >= bound(k, kp, data.B)


def test_theorem5_sharper_constant_factor():
    kp = np.arange(2, 500)
    factor = np.sqrt((kp + 1) / kp) * 2 ** (-1 / (2 * kp))
    assert np.all(factor > 1) and np.max(factor) <= 1.03


# --------------------------------------------------------------------- rebalancing


def test_rebalance_keeps_function_and_equalises_norms():
    rng = np.random.default_rng(8)
    for widths in SHALLOW + [(4, 7, 1, 3, 2)]:
        params = [W * s for W, s in zip(random_net(rng, widths), rng.uniform(0.1, 10, len(widths) - 1))]
        X = rng.standard_normal((60, widths[0]))
        bal = rebalance(params)
        F = np.array([fro(W) for W in params])
        geo = np.prod(F) ** (1 / len(F))
        assert shallow_B(params) == pytest.approx(geo, rel=1e-13)
        np.testing.assert_allclose([fro(W) for W in bal], geo, rtol=1e-13)
        assert_outputs_close(net(bal, X), net(params, X))
        np.testing.assert_allclose(layer_ratios(bal), layer_ratios(params), rtol=1e-13)
        assert sum(fro(W) ** 2 for W in bal) <= np.sum(F**2) * (1 + 1e-13)
        assert shallow_B(params) <= np.max(F)


def test_rebalance_batch():
    rng = np.random.default_rng(9)
    params = [rng.standard_normal((5, 3, 2)) * 4, rng.standard_normal((5, 1, 3)) / 3]
    bal = rebalance(params)
    X = rng.standard_normal((10, 2))
    for b in range(5):
        one = [W[b] for W in params]
        assert_outputs_close(net([W[b] for W in bal], X), net(one, X))
        assert shallow_B(params)[b] == pytest.approx(np.sqrt(fro(one[0]) * fro(one[1])), rel=1e-13)
        np.testing.assert_allclose([fro(W[b]) for W in bal], shallow_B(one), rtol=1e-13)


# ------------------------------------------------------------------------- ratios


def test_layer_ratios_and_summary():
    rng = np.random.default_rng(12)
    params = random_net(rng, (4, 6, 5, 3, 1))
    r = np.array([spec(W) / fro(W) for W in params])
    np.testing.assert_allclose(layer_ratios(params), r, rtol=1e-13)
    s = ratio_summary(params)
    np.testing.assert_allclose(s.ratios, r, rtol=1e-13)
    assert s.mean == pytest.approx(np.mean(r), rel=1e-13)
    assert s.harmonic == pytest.approx(stats.hmean(1 / r), rel=1e-13)
    # batch axes
    batch = [np.stack([W, 2 * W]) for W in params]
    np.testing.assert_allclose(layer_ratios(batch), np.stack([r, r]), rtol=1e-13)


def test_ratios_of_constructions():
    rng = np.random.default_rng(13)
    params = random_net(rng, (4, 6, 5, 1))
    k, kp = 3, 9
    r = [spec(W) / fro(W) for W in params]
    # Theorem 4: layers k..k' are rows or 1x1, ratio 1.
    np.testing.assert_allclose(layer_ratios(theorem4_network(params, kp)), r[:-1] + [1.0] * (kp - k + 1), rtol=1e-13)
    # Theorem 5: α[u; −u] and β(1, −1) have rank 1, βI_2 has ratio 1/√2.
    expected = r[:-1] + [1.0] + [1 / np.sqrt(2)] * (kp - k - 1) + [1.0]
    np.testing.assert_allclose(layer_ratios(theorem5_network(params, kp)), expected, rtol=1e-13)


# ------------------------------------------------------------------ teacher data


@pytest.mark.parametrize("widths", SHALLOW)
def test_teacher_data_theorem4(widths):
    X, Y, params, B = teacher_data(jax.random.PRNGKey(1), 25, widths, theorem=4)
    assert X.shape == (25, widths[0]) and Y.shape == (25, 1)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-15)
    np.testing.assert_array_equal(Y, net(params, X))
    assert np.min(Y) >= 0 and np.max(Y) == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose([fro(W) for W in params], B, rtol=1e-13)
    assert B >= 1 - 1e-13  # forced by 1 <= y_i <= Π‖W_j‖_σ <= B^k
    i = check_theorem4_assumptions(X, Y, params)
    assert Y[i, 0] == np.max(Y)


@pytest.mark.parametrize("widths", SHALLOW)
def test_teacher_data_theorem5(widths):
    gap = 0.02
    X, Y, params, B = teacher_data(jax.random.PRNGKey(2), 25, widths, theorem=5, gap=gap)
    out = net(params, X)
    np.testing.assert_array_equal(np.abs(Y), 1.0)
    np.testing.assert_array_equal(Y, np.sign(out))
    assert np.min(Y * out) == pytest.approx(1.0, rel=1e-14)
    assert np.min(np.abs(out)) > gap * np.prod([spec(W) for W in params])  # scale-invariant
    np.testing.assert_allclose([fro(W) for W in params], B, rtol=1e-13)
    assert B >= 1 - 1e-13
    check_theorem5_assumptions(X, Y, params)


def test_teacher_data_is_deterministic():
    key = jax.random.PRNGKey(5)
    a = teacher_data(key, 10, (3, 4, 1), theorem=5)
    b = teacher_data(key, 10, (3, 4, 1), theorem=5)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.Y, b.Y)
    assert a.B == b.B


# --------------------------------------------------------------------- bad inputs


def test_bad_bound_arguments():
    with pytest.raises(ValueError, match=r"^k:"):
        theorem4_bound(0, 3, 2.0)
    with pytest.raises(ValueError, match=r"^k_prime:"):
        theorem4_bound(2, 2, 2.0)
    with pytest.raises(ValueError, match=r"^k_prime:"):
        theorem5_bound(2, 2.5, 2.0)
    with pytest.raises(ValueError, match=r"^B:.*B >= 1"):
        theorem4_bound(2, 3, 0.9)
    with pytest.raises(ValueError, match=r"^B:"):
        theorem5_bound(2, 3, np.nan)
    with pytest.raises(ValueError, match=r"^B:"):
        theorem5_norm_sq(2, 3, 0.0)
    assert theorem4_norm_sq(1, 2, 0.5) == pytest.approx(2 * 0.5)


def test_bad_construction_arguments():
    rng = np.random.default_rng(0)
    params = random_net(rng, (3, 4, 1))
    with pytest.raises(ValueError, match=r"^params\[1\]:.*scalar output"):
        theorem4_network(random_net(rng, (3, 4, 2)), 4)
    with pytest.raises(ValueError, match=r"^params\[1\]:"):
        theorem5_network([rng.standard_normal((4, 3)), rng.standard_normal((1, 5))], 4)
    with pytest.raises(ValueError, match=r"^k_prime:"):
        theorem4_network(params, 2)
    with pytest.raises(ValueError, match=r"^k_prime:"):
        theorem5_network(params, 3.0)
    with pytest.raises(ValueError, match=r"^B:"):
        theorem4_network(params, 4, B=0.5 * max(fro(W) for W in params))
    with pytest.raises(ValueError, match=r"^width:"):
        theorem5_network(random_net(rng, (3, 1)), 3, width=1)
    with pytest.raises(ValueError, match=r"^width:"):
        theorem4_network(params, 4, width=3)
    with pytest.raises(ValueError, match=r"^params:"):
        rebalance([params[0], np.zeros((1, 4))])


def test_bad_assumption_inputs():
    rng = np.random.default_rng(1)
    X = unit_rows(rng, 4, 3)
    params = random_net(rng, (3, 4, 1))
    with pytest.raises(ValueError, match=r"^Y:.*y_i >= 0"):
        check_theorem4_assumptions(X, np.array([1.0, -0.5, 0.2, 0.0]))
    with pytest.raises(ValueError, match=r"^X, Y:"):
        check_theorem4_assumptions(X, np.array([0.9, 0.5, 0.2, 0.0]))
    with pytest.raises(ValueError, match=r"^X, Y:"):
        check_theorem4_assumptions(2 * X, np.array([1.5, 0.5, 0.2, 0.0]))
    with pytest.raises(ValueError, match=r"^atol:"):
        check_theorem5_assumptions(X, np.ones(4), atol=-1.0)
    with pytest.raises(ValueError, match=r"^Y:.*shape"):
        check_theorem4_assumptions(X, np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"^params:"):
        check_theorem4_assumptions(X, np.array([1.0, 0.5, 0.2, 0.0]), params)
    with pytest.raises(ValueError, match=r"^params\[0\]:"):
        check_theorem4_assumptions(X, np.array([1.0, 0.5, 0.2, 0.0]), random_net(rng, (2, 4, 1)))
    assert check_theorem4_assumptions(X, np.array([1.0, 0.5, 3.0, 0.0])) == 2
    with pytest.raises(ValueError, match=r"^Y:.*-1, \+1"):
        check_theorem5_assumptions(X, np.array([1.0, -1.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match=r"^X:"):
        check_theorem5_assumptions(1.5 * X, np.array([1.0, -1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"^params:"):
        check_theorem5_assumptions(X, np.sign(net(params, X))[:, 0] * 1.0, [W * 1e-3 for W in params])


def test_bad_teacher_arguments():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"^widths:"):
        teacher_data(key, 5, (3, 2))
    with pytest.raises(ValueError, match=r"^theorem:"):
        teacher_data(key, 5, (3, 1), theorem=3)
    with pytest.raises(ValueError, match=r"^n:"):
        teacher_data(key, 0, (3, 1))
    with pytest.raises(ValueError, match=r"^gap:"):
        teacher_data(key, 5, (3, 1), theorem=5, gap=1.0)
