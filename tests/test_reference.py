"""Tests of gflow.reference, each against something independent of the code it checks:
finite differences, closed forms, conservation laws, a plain integration of the
non-smooth field, hand-computed steps, or the other implementation (NumPy vs JAX)."""

import numpy as np
import pytest
import scipy.integrate
from conftest import max_diff

from gflow.reference import (
    LOSSES,
    balance_drift,
    balance_invariants,
    gradient_descent,
    gradient_descent_batch,
    loss_gradient,
    loss_value,
    preactivations,
    scipy_flow,
)

pytestmark = pytest.mark.quick  # the whole file is in the fast tier (tests/run.py --quick)

RTOL, ATOL = 1e-12, 1e-14  # scipy_flow's default tolerances


# --------------------------------------------------------------------------------------
# Named problems
# --------------------------------------------------------------------------------------


def random_problem(seed, widths, n, loss="square", scale=0.6):
    """Random weights, Gaussian inputs; targets from a random teacher (or its signs)."""
    rng = np.random.default_rng(seed)
    params = [
        rng.normal(size=(b, a)) * scale / np.sqrt(a) * np.sqrt(2) for a, b in zip(widths[:-1], widths[1:], strict=True)
    ]
    X = rng.normal(size=(n, widths[0]))
    teacher = [rng.normal(size=(b, a)) / np.sqrt(a) for a, b in zip(widths[:-1], widths[1:], strict=True)]
    h = X
    for W in teacher[:-1]:
        h = np.maximum(h @ W.T, 0.0)
    Y = h @ teacher[-1].T
    if loss in ("exponential", "logistic"):
        Y = np.where(Y[:, 0] >= 0, 1.0, -1.0)
    return params, X, Y


def two_point_problem(theta=2.0):
    """SPEC §4: x1 = (1, 0), x2 = (cos θ, sin θ), Y = I, w_i strictly inside S_i, V = 0."""
    x1 = np.array([1.0, 0.0])
    x2 = np.array([np.cos(theta), np.sin(theta)])
    perp1 = np.array([0.0, 1.0])
    perp2 = np.array([-np.sin(theta), np.cos(theta)])
    w1 = 0.3 * x1 + 0.05 * perp1  # w1·x1 = 0.3 > 0 > w1·x2
    w2 = 0.25 * x2 - 0.05 * perp2  # w2·x2 = 0.25 > 0 > w2·x1
    assert w1 @ x2 < 0 and w2 @ x1 < 0
    return [np.stack([w1, w2]), np.zeros((2, 2))], np.stack([x1, x2]), np.eye(2)


def two_point_limit(params, X, Y):
    """Closed-form limit of the two-point flow (u² − b² conserved, u·b → 1)."""
    W0 = params[0]
    W, V = W0.copy(), np.zeros((2, 2))
    for i in range(2):
        u0 = W0[i] @ X[i]
        u = np.sqrt((u0**2 + np.sqrt(u0**4 + 4)) / 2)
        W[i] = W0[i] + (u - u0) * X[i]
        V[:, i] = Y[i] / u
    return [W, V]


DEPTH3 = dict(seed=20, widths=(3, 5, 5, 2), n=6)  # crosses 8 kinks by t = 3, no sliding


def depth3_problem():
    rng = np.random.default_rng(DEPTH3["seed"])
    params = [rng.normal(size=(5, 3)) * 0.6, rng.normal(size=(5, 5)) * 0.5, rng.normal(size=(2, 5)) * 0.5]
    X = rng.normal(size=(6, 3))
    teacher = [rng.normal(size=(5, 3)), rng.normal(size=(5, 5)), rng.normal(size=(2, 5))]
    h = X
    for W in teacher[:-1]:
        h = np.maximum(h @ W.T, 0.0)
    return params, X, h @ teacher[-1].T


def flat(params):
    return np.concatenate([W.ravel() for W in params])


def unflat(theta, like):
    out, k = [], 0
    for W in like:
        out.append(theta[k : k + W.size].reshape(W.shape))
        k += W.size
    return out


def plain_flow(params, X, Y, t1, loss="square", weight_decay=0.0):
    """DOP853 on the non-smooth field itself (true signs, no events): the field is
    continuous, so error control alone gets through the kinks, to a looser accuracy."""

    def f(t, y):
        return -flat(loss_gradient(unflat(y, params), X, Y, loss, weight_decay))

    return scipy.integrate.solve_ivp(
        f, (0.0, t1), flat(params), method="DOP853", rtol=1e-13, atol=1e-14, dense_output=True
    )


# --------------------------------------------------------------------------------------
# NumPy gradient
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("widths", [(3, 4, 2), (3, 4, 5, 2)])
def test_gradient_matches_central_difference(loss, widths):
    if loss in ("exponential", "logistic"):
        widths = widths[:-1] + (1,)
    params, X, Y = random_problem(0, widths, n=5, loss=loss)
    assert min(np.min(np.abs(p)) for p in preactivations(params, X)) > 1e-3  # away from kinks
    weight_decay = 0.3
    grad = flat(loss_gradient(params, X, Y, loss, weight_decay))
    theta, h = flat(params), 1e-6
    fd = np.empty_like(theta)
    for k in range(theta.size):
        e = np.zeros_like(theta)
        e[k] = h
        fd[k] = (
            loss_value(unflat(theta + e, params), X, Y, loss, weight_decay)
            - loss_value(unflat(theta - e, params), X, Y, loss, weight_decay)
        ) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-8 * np.max(np.abs(fd)))


def test_loss_value_normalisations():
    params, X, Y = random_problem(2, (3, 4, 2), n=5)
    square = loss_value(params, X, Y, "square")
    assert loss_value(params, X, Y, "mse") == pytest.approx(2 * square / Y.size, rel=1e-14)
    decayed = loss_value(params, X, Y, "square", weight_decay=0.5)
    assert decayed - square == pytest.approx(0.25 * sum(np.sum(W**2) for W in params), rel=1e-12)


def test_balance_invariants_by_hand():
    W1 = np.array([[1.0, 2.0], [3.0, 0.0], [0.0, 1.0]])
    W2 = np.array([[1.0, 0.0, 2.0], [1.0, 1.0, 0.0]])
    W3 = np.array([[2.0, 3.0]])
    # layer 0: ‖W1[j]‖² − ‖W2[:, j]‖² = (5−2, 9−1, 1−4); layer 1: ‖W2[j]‖² − ‖W3[:, j]‖² = (5−4, 2−9)
    np.testing.assert_array_equal(balance_invariants([W1, W2, W3]), [3.0, 8.0, -3.0, 1.0, -7.0])
    # Neuron scales ‖W1[j]‖² + ‖W2[:, j]‖² = (7, 10, 5), ‖W2[j]‖² + ‖W3[:, j]‖² = (9, 11).
    # Doubling W1[2] moves its invariant by 3 (1 → 4): relative drift 3/5.
    moved = [W1 * np.array([[1.0], [1.0], [2.0]]), W2, W3]
    assert balance_drift([W1, W2, W3], moved) == pytest.approx(0.6, rel=1e-15)
    # Under weight decay λ for time t every invariant should have shrunk by e^{−2λt}.
    shrunk = [W * np.exp(-0.1 * 2.0) for W in (W1, W2, W3)]  # weights e^{−λt}
    assert balance_drift([W1, W2, W3], shrunk, weight_decay=0.1, t=2.0) <= 1e-15
    assert balance_drift([W1, W2, W3], shrunk) == pytest.approx(8.0 * (1 - np.exp(-0.4)) / 10.0, rel=1e-14)
    assert balance_drift([W1, W2, W3], moved, scale=1.0) == 3.0


# --------------------------------------------------------------------------------------
# scipy_flow
# --------------------------------------------------------------------------------------


def test_two_point_flow_reaches_closed_form_limit():
    params, X, Y = two_point_problem()
    result = scipy_flow(params, X, Y, t1=60.0)
    assert result.crossings == [] and not result.slid and result.t == 60.0
    assert max_diff(result.params, two_point_limit(params, X, Y)) < 1e-9


def test_depth3_flow_conserves_balance_and_matches_plain_integration():
    params, X, Y = depth3_problem()
    t1 = 3.0
    result = scipy_flow(params, X, Y, t1=t1)
    assert not result.slid and result.t == t1
    assert len(result.crossings) >= 1
    times = [c[0] for c in result.crossings]
    assert times == sorted(times)
    np.testing.assert_allclose(balance_invariants(result.params), balance_invariants(params), rtol=0, atol=1e-9)

    plain = plain_flow(params, X, Y, t1)
    assert max_diff(result.params, unflat(plain.y[:, -1], params)) < 1e-8
    # Each recorded kink: the pre-activation is 0 there and changes sign as recorded.
    for t, layer, neuron, point, direction in result.crossings:
        p = [preactivations(unflat(plain.sol(s), params), X)[layer][neuron, point] for s in (t - 1e-5, t, t + 1e-5)]
        assert abs(p[1]) < 1e-8
        assert direction * p[0] < 0 < direction * p[2]


@pytest.mark.parametrize("loss", ["mse", "exponential", "logistic"])
def test_other_losses_match_plain_integration(loss):
    widths = (2, 6, 1) if loss != "mse" else (2, 6, 2)
    params, X, Y = random_problem(7, widths, n=8, loss=loss, scale=1.0)
    result = scipy_flow(params, X, Y, loss=loss, t1=2.0)
    assert not result.slid and len(result.crossings) >= 1
    plain = plain_flow(params, X, Y, 2.0, loss=loss)
    assert max_diff(result.params, unflat(plain.y[:, -1], params)) < 1e-8
    assert loss_value(result.params, X, Y, loss) < loss_value(params, X, Y, loss)


def test_weight_decay_balance_decays_exponentially():
    params, X, Y = two_point_problem()
    lam, t1 = 0.1, 5.0
    result = scipy_flow(params, X, Y, t1=t1, weight_decay=lam)
    np.testing.assert_allclose(
        balance_invariants(result.params), balance_invariants(params) * np.exp(-2 * lam * t1), rtol=0, atol=1e-10
    )


def test_simultaneous_crossings_of_duplicate_points():
    params, X, Y = depth3_problem()
    X, Y = np.vstack([X, X[4]]), np.vstack([Y, Y[4]])  # point 6 duplicates point 4
    result = scipy_flow(params, X, Y, t1=1.0)
    assert not result.slid
    on4 = [(t, layer, j, d) for t, layer, j, i, d in result.crossings if i == 4]
    on6 = [(t, layer, j, d) for t, layer, j, i, d in result.crossings if i == 6]
    assert len(on4) >= 1 and len(on4) == len(on6)
    for a, b in zip(on4, on6, strict=True):
        assert a[1:] == b[1:] and abs(a[0] - b[0]) < 1e-12
    plain = plain_flow(params, X, Y, 1.0)
    assert max_diff(result.params, unflat(plain.y[:, -1], params)) < 1e-8


def test_dead_and_zero_neurons_stay_frozen():
    params, X, Y = depth3_problem()
    X = X.copy()
    X[:, 0] = np.abs(X[:, 0]) + 0.1
    W1 = params[0].copy()
    W1[1] = 0.0  # pre-activations exactly 0 on every point
    W1[2] = [-1.0, 0.0, 0.0]  # pre-activations < 0 on every point: dead
    params = [W1, params[1], params[2]]
    result = scipy_flow(params, X, Y, t1=2.0)
    assert len(result.crossings) >= 1
    for j in (1, 2):
        np.testing.assert_array_equal(result.params[0][j], W1[j])
        np.testing.assert_array_equal(result.params[1][:, j], params[1][:, j])
        assert not any(c[1] == 0 and c[2] == j for c in result.crossings)


def test_zero_data_point_changes_nothing():
    """x = 0 has every pre-activation exactly 0 for ever: no kinks, no gradient."""
    params, X, Y = depth3_problem()
    base = scipy_flow(params, X, Y, t1=1.0)
    result = scipy_flow(params, np.vstack([X, np.zeros(3)]), np.vstack([Y, [1.0, -1.0]]), t1=1.0)
    assert [c[:4] for c in result.crossings] == [c[:4] for c in base.crossings]
    assert max_diff(result.params, base.params) < 1e-10


def test_sliding_mode_is_detected():
    """One neuron pulled towards x2 by x1 while x2 (label −1) pushes it back."""
    a = 0.5
    x1, x2 = np.array([1.0, 0.0]), np.array([np.cos(a), np.sin(a)])
    X, Y = np.stack([x1, x2]), np.array([[1.0], [-1.0]])
    w = 0.1 * x1 + np.array([0.0, -(0.01 + 0.1 * np.cos(a)) / np.sin(a)])  # w·x2 = −0.01
    params = [w[None, :], np.array([[0.1]])]
    result = scipy_flow(params, X, Y, t1=50.0)
    assert result.slid and 0 < result.t < 50.0 and result.crossings == []
    w, b = result.params[0][0], result.params[1][0, 0]
    u, p2 = w @ x1, w @ x2
    assert abs(p2) < 1e-10
    # One-sided rates of p2 = w·x2 (r1 = b u − 1, r2 = 0 − (−1) = 1 on the surface):
    inactive = -b * (b * u - 1) * (x1 @ x2)
    active = inactive - b * 1.0 * (x2 @ x2)
    assert inactive > 0 > active
    # Up to the stop, the flow is classical: plain integration agrees.
    plain = plain_flow(params, X, Y, result.t)
    assert max_diff(result.params, unflat(plain.y[:, -1], params)) < 1e-8


def test_scipy_flow_rejects_bad_input():
    params, X, Y = two_point_problem()
    with pytest.raises(ValueError, match="`loss`"):
        scipy_flow(params, X, Y, loss="hinge", t1=1.0)
    with pytest.raises(ValueError, match="`X`"):
        scipy_flow(params, X[:, :1], Y, t1=1.0)
    with pytest.raises(ValueError, match="`Y`"):
        scipy_flow(params, X, Y[:, :1], t1=1.0)
    with pytest.raises(ValueError, match=r"`params\[1\]`"):
        scipy_flow([params[0], np.zeros((2, 3))], X, Y, t1=1.0)
    with pytest.raises(ValueError, match="`t1`"):
        scipy_flow(params, X, Y, t1=-1.0)
    with pytest.raises(ValueError, match="d_out"):
        scipy_flow(params, X, np.ones(2), loss="logistic", t1=1.0)


# --------------------------------------------------------------------------------------
# Gradient descent
# --------------------------------------------------------------------------------------


def test_one_step_by_hand():
    # x = (1, 0): neuron 1 has pre-activation 1, neuron 2 exactly 0 (σ'(0) = 0 freezes it;
    # jnp.maximum would give it half a gradient). N(x) = 2, y = 1, residual 1.
    W = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[2.0, 3.0]])
    X, Y = np.array([[1.0, 0.0]]), np.array([[1.0]])
    lr, lam = 0.1, 0.5
    W1, V1 = gradient_descent([W, V], X, Y, lr=lr, steps=1, weight_decay=lam)
    # ∂L/∂V = r·σ(Wx) = (1, 0); ∂L/∂W = r·V ⊙ σ'(Wx) ⊗ x = [[2, 0], [0, 0]]; plus λθ.
    np.testing.assert_allclose(V1, V - lr * (np.array([[1.0, 0.0]]) + lam * V), rtol=0, atol=1e-15)
    np.testing.assert_allclose(W1, W - lr * (np.array([[2.0, 0.0], [0.0, 0.0]]) + lam * W), rtol=0, atol=1e-15)


@pytest.mark.parametrize("loss", LOSSES)
def test_jax_step_matches_numpy_gradient(loss):
    widths = (3, 4, 5, 1) if loss in ("exponential", "logistic") else (3, 4, 5, 2)
    params, X, Y = random_problem(3, widths, n=6, loss=loss)
    lr, lam = 0.05, 0.2
    grad = loss_gradient(params, X, Y, loss, lam)
    stepped = gradient_descent(params, X, Y, lr=lr, steps=1, loss=loss, weight_decay=lam)
    assert max_diff(stepped, [W - lr * g for W, g in zip(params, grad, strict=True)]) < 1e-14


def test_gradient_descent_is_first_order_in_lr():
    params, X, Y = two_point_problem()
    T = 2.0
    exact = scipy_flow(params, X, Y, t1=T).params
    errors = [max_diff(gradient_descent(params, X, Y, lr=T / m, steps=m), exact) for m in (1000, 2000, 4000)]
    assert errors[0] < 1e-2
    for coarse, fine in zip(errors[:-1], errors[1:], strict=True):
        assert 1.9 < coarse / fine < 2.1


@pytest.mark.parametrize("widths", [(2, 2, 2), (3, 40, 40, 2)])
def test_batch_matches_single(widths):
    params, X, Y = random_problem(5, widths, n=30)
    scales = (1.0, 0.8, 1.2)
    batch = [np.stack([s * W for s in scales]) for W in params]
    shared = gradient_descent_batch(batch, X, Y, lr=1e-3, steps=20)
    per_net = gradient_descent_batch(batch, np.stack([X] * 3), np.stack([Y] * 3), lr=1e-3, steps=20)
    for b, s in enumerate(scales):
        single = gradient_descent([s * W for W in params], X, Y, lr=1e-3, steps=20)
        assert max_diff(single, [W[b] for W in shared]) < 1e-13
        assert max_diff(single, [W[b] for W in per_net]) < 1e-13


def test_gradient_descent_rejects_bad_input():
    params, X, Y = two_point_problem()
    with pytest.raises(ValueError, match="`lr`"):
        gradient_descent(params, X, Y, lr=0.0, steps=1)
    with pytest.raises(ValueError, match="`steps`"):
        gradient_descent(params, X, Y, lr=0.1, steps=1.5)
    with pytest.raises(ValueError, match=r"`params\[0\]`"):
        gradient_descent_batch(params, X, Y, lr=0.1, steps=1)
