"""Tests of gflow.theory against independent NumPy/SciPy computations.

The exact-limit oracle ``s1_s2_limit`` is checked against ``scipy.integrate.solve_ivp``
(DOP853) on the plain ReLU gradient field written out here; the region probabilities
against binomial 4-sigma intervals; the constructions by evaluating the network with
plain NumPy.
"""

import jax
import numpy as np
import pytest
from scipy import stats
from scipy.integrate import solve_ivp

from gflow.theory import (
    angle,
    authors_data,
    check_assumptions,
    dist_to_rank1,
    effective_rank,
    lemma2_solution,
    rank_ratio,
    row_angle,
    row_norm_ratio,
    s1_s2_angle_interval,
    s1_s2_limit,
    sample_theorem3_init,
    sample_two_point_data,
    satisfies_theorem2,
    sigma_ratio,
    stable_rank,
    theorem1_solution,
    theorem2_angle_interval,
    theorem2_radius,
    theorem3_angle_interval,
    theorem3_bound,
    theorem3_event,
    theorem3_norm_interval,
)

pytestmark = pytest.mark.quick  # the whole file is in the fast tier (tests/run.py --quick)

AUTHORS_THETA = np.arccos(-(1 - 0.99**2) / (1 + 0.99**2))


# --------------------------------------------------------------- independent helpers


def relu(z):
    return np.where(z > 0, z, 0.0)


def net(W, V, X):
    """``N(x_i) = V σ(W x_i)`` for each row of ``X``: shape ``(n, d_out)``."""
    return relu(X @ W.T) @ V.T


def loss_and_grad(W, V, X, Y):
    """``L = ½ Σ‖V σ(W x_i) − y_i‖²`` and its gradient with ``σ'(0) = 0``."""
    P = X @ W.T  # (n, m)
    H = relu(P)
    R = H @ V.T - Y  # (n, d_out)
    gV = R.T @ H  # (d_out, m)
    gW = ((R @ V) * (P > 0)).T @ X  # (m, d_in)
    return 0.5 * np.sum(R**2), gW, gV


def flow(W0, V0, X, Y, t1=60.0):
    """Gradient flow of the 2-layer ReLU net, DOP853 at rtol 1e-12, atol 1e-14."""
    sW, sV = W0.shape, V0.shape

    def rhs(t, z):
        W, V = z[: W0.size].reshape(sW), z[W0.size :].reshape(sV)
        _, gW, gV = loss_and_grad(W, V, X, Y)
        return -np.concatenate([gW.ravel(), gV.ravel()])

    z0 = np.concatenate([W0.ravel(), V0.ravel()])
    sol = solve_ivp(rhs, (0.0, t1), z0, method="DOP853", rtol=1e-12, atol=1e-14)
    assert sol.success, sol.message
    z = sol.y[:, -1]
    return z[: W0.size].reshape(sW), z[W0.size :].reshape(sV)


def np_angle(a, b):
    return np.arccos(np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), -1.0, 1.0))


def unit(phi):
    return np.array([np.cos(phi), np.sin(phi)])


def random_assumption_data(rng):
    """Unit-norm data with θ_x uniform in (π/2, π) and random labels (independent of gflow)."""
    phi, theta = rng.uniform(0, 2 * np.pi), rng.uniform(np.pi / 2 + 0.01, np.pi - 0.01)
    X = np.stack([unit(phi), unit(phi + theta)])
    a = rng.uniform(0, 2 * np.pi)
    Y = np.stack([unit(a), unit(a + rng.uniform(0.3, np.pi - 0.3))])
    return X, Y, theta


def draw_in_cone(rng, X, i, radius=0.5, umin=1e-2):
    """A point of the disk with ``w·x_i > umin`` and ``w·x_o < −1e-3`` (rejection sampling)."""
    while True:
        w = rng.uniform(-radius, radius, size=X.shape[1])
        if np.linalg.norm(w) < radius and w @ X[i] > umin and w @ X[1 - i] < -1e-3:
            return w


# ------------------------------------------------------------------------------ data


def test_authors_data():
    X, Y = authors_data()
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(X[0] * np.linalg.norm([1, 0.99]), [1, 0.99], atol=1e-15)
    np.testing.assert_array_equal(Y, np.eye(2))
    assert abs(np_angle(X[0], X[1]) - AUTHORS_THETA) < 1e-12
    assert abs(np.degrees(AUTHORS_THETA) - 90.5758) < 1e-3
    assert abs(check_assumptions(X, Y) - AUTHORS_THETA) < 1e-12


def test_sample_two_point_data_assumptions_and_distribution():
    thetas, phis = [], []
    for s in range(300):
        X, Y = sample_two_point_data(jax.random.key(s))
        assert X.shape == Y.shape == (2, 2) and X.dtype == Y.dtype == np.float64
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
        np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, atol=1e-14)
        assert abs(np.linalg.det(Y)) > 1e-8
        th = np_angle(X[0], X[1])
        assert np.pi / 2 < th < np.pi
        thetas.append(th)
        phis.append(np.arctan2(X[0, 1], X[0, 0]) % (2 * np.pi))
    # θ_x uniform on (π/2, π); orientation of x_1 uniform on the circle.
    assert stats.kstest(thetas, stats.uniform(np.pi / 2, np.pi / 2).cdf).pvalue > 1e-3
    assert stats.kstest(phis, stats.uniform(0, 2 * np.pi).cdf).pvalue > 1e-3
    # Same key, same data; different keys, different data.
    X0, Y0 = sample_two_point_data(jax.random.key(7))
    X1, Y1 = sample_two_point_data(jax.random.key(7))
    np.testing.assert_array_equal(X0, X1)
    np.testing.assert_array_equal(Y0, Y1)
    assert not np.allclose(X0, sample_two_point_data(jax.random.key(8))[0])


@pytest.mark.parametrize("theta", [1.6, 2.0, 3.0, AUTHORS_THETA])
def test_sample_two_point_data_given_angle(theta):
    for s in range(20):
        X, Y = sample_two_point_data(jax.random.key(s), theta_x=theta)
        assert abs(np_angle(X[0], X[1]) - theta) < 1e-12
        assert abs(check_assumptions(X, Y) - theta) < 1e-12


@pytest.mark.parametrize("theta", [np.pi / 2, np.pi, 1.0, 4.0, float("nan")])
def test_sample_two_point_data_rejects_angle(theta):
    with pytest.raises(ValueError, match="theta_x"):
        sample_two_point_data(jax.random.key(0), theta_x=theta)


def test_angle():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    expected = [np_angle(p, q) for p, q in zip(a, b, strict=True)]
    np.testing.assert_allclose(angle(a, b), expected, atol=1e-12)
    assert abs(angle([1.0, 0.0], [1.0, 1e-9]) - 1e-9) < 1e-20
    assert abs(angle([1.0, 0.0], [-1.0, 1e-9]) - (np.pi - 1e-9)) < 1e-15
    assert angle([2.0, 0.0], [0.0, 3.0]) == pytest.approx(np.pi / 2, abs=1e-15)
    with pytest.raises(ValueError, match="a"):
        angle([0.0, 0.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="b"):
        angle([1.0, 0.0], [0.0, 0.0])


def test_check_assumptions_failures():
    X, Y = authors_data()
    with pytest.raises(ValueError, match="unit-norm points"):
        check_assumptions(2 * X, Y)
    with pytest.raises(ValueError, match="unit-norm labels"):
        check_assumptions(X, 2 * Y)
    with pytest.raises(ValueError, match="linearly independent"):
        check_assumptions(X, np.stack([Y[0], Y[0]]))
    with pytest.raises(ValueError, match="Assumption 2"):
        check_assumptions(np.stack([unit(0.0), unit(1.0)]), Y)  # acute angle
    with pytest.raises(ValueError, match="Assumption 2"):
        check_assumptions(np.stack([unit(0.0), unit(np.pi)]), Y)  # opposite points
    with pytest.raises(ValueError, match="shape"):
        check_assumptions(np.ones((3, 2)), Y)


# ------------------------------------------------------------------ Theorem 1, Lemma 2


def test_theorem1_solution_random_data():
    rng = np.random.default_rng(1)
    for _ in range(200):
        d_in, d_out = rng.integers(2, 5), rng.integers(1, 4)
        X = rng.normal(size=(2, d_in)) * rng.uniform(0.1, 10.0, size=(2, 1))  # non-unit norms
        Y = rng.normal(size=(2, d_out)) * rng.uniform(0.1, 10.0, size=(2, 1))
        c = rng.uniform(0.1, 5.0)
        W, V = theorem1_solution(X, Y, c=c)
        assert W.shape == (2, d_in) and V.shape == (d_out, 2)
        assert np.linalg.matrix_rank(W) == 1
        np.testing.assert_allclose(W[1], -c * W[0], rtol=1e-15)
        assert W[0] @ X[0] > 0 > W[0] @ X[1]
        np.testing.assert_allclose(net(W, V, X), Y, rtol=1e-10, atol=1e-10 * np.abs(Y).max())
    # the authors' data and a user-chosen first neuron
    X, Y = authors_data()
    W, V = theorem1_solution(X, Y, w1=np.array([1.0, 0.0]))
    assert np.linalg.matrix_rank(W) == 1
    np.testing.assert_allclose(net(W, V, X), Y, atol=1e-14)


def test_theorem1_solution_rejects():
    X, Y = authors_data()
    with pytest.raises(ValueError, match="c"):
        theorem1_solution(X, Y, c=0.0)
    with pytest.raises(ValueError, match="w1"):
        theorem1_solution(X, Y, w1=np.array([0.0, 1.0]))  # active on both points
    with pytest.raises(ValueError, match="linearly independent"):
        theorem1_solution(np.array([[1.0, 2.0], [-2.0, -4.0]]), Y)
    with pytest.raises(ValueError, match="X"):
        theorem1_solution(np.ones((3, 2)), Y)


def test_lemma2_solution_random():
    rng = np.random.default_rng(2)
    n_ok = n_raise = 0
    for trial in range(200):
        n, d_in, d_out = rng.integers(2, 4), rng.integers(2, 5), rng.integers(1, 4)
        X = rng.normal(size=(n, d_in)) * rng.uniform(0.2, 5.0, size=(n, 1))
        Y = rng.normal(size=(n, d_out))
        if trial % 2 == 0 and n == 2:
            # rank-1 W: a random w with w·x_1 > 0 > w·x_2, and a negative multiple of it
            while True:
                w = rng.normal(size=d_in)
                if w @ X[0] > 0 > w @ X[1]:
                    break
            W = np.stack([w, -rng.uniform(0.1, 3.0) * w])
            assert np.linalg.matrix_rank(W) == 1
        else:
            W = rng.normal(size=(rng.integers(n, n + 3), d_in))
        A = relu(W @ X.T)
        s = np.linalg.svd(A, compute_uv=False)
        if s[n - 1] > 1e-6 * s[0]:
            W2, V = lemma2_solution(W, X, Y)
            np.testing.assert_array_equal(W2, W)
            assert V.shape == (d_out, W.shape[0])
            np.testing.assert_allclose(net(W, V, X), Y, atol=1e-9 * (1 + np.abs(Y).max()))
            n_ok += 1
        elif np.linalg.matrix_rank(A) < n:
            with pytest.raises(ValueError, match="rank"):
                lemma2_solution(W, X, Y)
            n_raise += 1
    assert n_ok > 100 and n_raise > 5


# ------------------------------------------------------------- exact limit, S_1 x S_2


def _check_limit_against_flow(W0, V0, X, Y):
    W_lim, V_lim = s1_s2_limit([W0, V0], X, Y)
    W_ode, V_ode = flow(W0, V0, X, Y)
    assert loss_and_grad(W_ode, V_ode, X, Y)[0] < 1e-20  # the flow has converged by t = 60
    np.testing.assert_allclose(W_lim, W_ode, rtol=0, atol=1e-9)
    np.testing.assert_allclose(V_lim, V_ode, rtol=0, atol=1e-9)
    np.testing.assert_allclose(net(W_lim, V_lim, X), Y, atol=1e-13)
    # the balance ‖w_j‖² − ‖v_j‖² is conserved
    np.testing.assert_allclose(
        np.sum(W_lim**2, 1) - np.sum(V_lim**2, 0), np.sum(W0**2, 1) - np.sum(V0**2, 0), atol=1e-12
    )
    return W_lim, V_lim


def test_s1_s2_limit_matches_ode_unit_norm_v0_zero():
    rng = np.random.default_rng(3)
    datasets = [authors_data() + (AUTHORS_THETA,)] * 2 + [random_assumption_data(rng) for _ in range(3)]
    for k, (X, Y, _) in enumerate(datasets):
        order = (0, 1) if k % 2 == 0 else (1, 0)  # also w_1 in S_2, w_2 in S_1
        W0 = np.stack([draw_in_cone(rng, X, order[0]), draw_in_cone(rng, X, order[1])])
        W_lim, _ = _check_limit_against_flow(W0, np.zeros((2, 2)), X, Y)
        # the closed form of the docstring, unit norms: u∞² = (u0² + √(u0⁴ + 4))/2
        for j, i in enumerate(order):
            u0 = W0[j] @ X[i]
            assert (W_lim[j] @ X[i]) ** 2 == pytest.approx((u0**2 + np.sqrt(u0**4 + 4)) / 2, rel=1e-13)


def test_s1_s2_limit_matches_ode_general():
    rng = np.random.default_rng(4)
    # non-unit norms with x_1·x_2 < 0, and a parallel non-zero V(0) of either sign
    # (‖x_i‖‖y_i‖ >= ½ keeps the final convergence rate u² + ‖x_i‖²‖y_i‖²/u² >= 1)
    X = np.stack([1.6 * unit(0.3), 0.7 * unit(0.3 + 2.2)])
    Y = np.stack([1.5 * unit(1.0), 0.8 * unit(2.5)])
    for b0 in [(0.0, 0.0), (0.3, 0.1), (2.0, 1.0), (-0.1, -0.05)]:
        W0 = np.stack([draw_in_cone(rng, X, 0, umin=0.1), draw_in_cone(rng, X, 1, umin=0.1)])
        V0 = np.stack([b0[0] * Y[0], b0[1] * Y[1]], axis=1)
        _check_limit_against_flow(W0, V0, X, Y)
    # d_in = 3, d_out = 3
    X = np.array([[1.0, 0.2, 0.5], [-0.8, 0.4, -0.3]])
    Y = rng.normal(size=(2, 3))
    W0 = np.stack([draw_in_cone(rng, X, 0, umin=0.05), draw_in_cone(rng, X, 1, umin=0.05)])
    _check_limit_against_flow(W0, np.zeros((3, 2)), X, Y)


def test_s1_s2_limit_premise_errors():
    X, Y = authors_data()
    ok = [np.stack([0.3 * X[0] - 0.1 * X[1], 0.3 * X[1] - 0.1 * X[0]]), np.zeros((2, 2))]
    assert ok[0][0] @ X[0] > 0 > ok[0][0] @ X[1] and ok[0][1] @ X[1] > 0 > ok[0][1] @ X[0]
    s1_s2_limit(ok, X, Y)  # no error
    w_S, w_D = 0.2 * (X[0] + X[1]), -0.2 * (X[0] + X[1])
    for W0 in (
        np.stack([w_S, ok[0][1]]),  # w_1 in S (active on both)
        np.stack([w_D, ok[0][1]]),  # w_1 in D (dead)
        np.stack([ok[0][0], ok[0][0]]),  # both in S_1
        np.stack([np.array([X[1, 1], -X[1, 0]]), ok[0][1]]),  # w_1 on the S_1/S boundary
    ):
        with pytest.raises(ValueError, match="params0"):
            s1_s2_limit([W0, np.zeros((2, 2))], X, Y)
    with pytest.raises(ValueError, match="parallel"):
        s1_s2_limit([ok[0], np.array([[0.0, 0.0], [0.1, 0.0]])], X, Y)  # v_1 not along y_1
    with pytest.raises(ValueError, match="dies"):
        s1_s2_limit([0.01 * ok[0], np.diag([-0.5, 0.0])], X, Y)  # b_0 < 0 with C <= 0
    # acute data: the neuron's path along x_1 leaves S_1 into S
    Xa = np.stack([unit(0.0), unit(np.pi / 3)])
    W0 = np.stack([0.1 * unit(-np.radians(40)), 0.1 * unit(np.pi / 3 + np.radians(40))])
    assert W0[0] @ Xa[0] > 0 > W0[0] @ Xa[1]
    with pytest.raises(ValueError, match="leaves its cone"):
        s1_s2_limit([W0, np.zeros((2, 2))], Xa, Y)
    with pytest.raises(ValueError, match="params"):
        s1_s2_limit([ok[0]], X, Y)


# ------------------------------------------------------------------------ Theorem 2, 3


def test_theorem2_radius_and_interval():
    assert theorem2_radius(np.radians(100)) == 0.5
    assert theorem2_radius(np.radians(150)) == pytest.approx(np.sqrt(3) / 2 * np.cos(np.radians(75)), rel=1e-15)
    X, _ = authors_data()
    r = theorem2_radius(AUTHORS_THETA)
    W = np.stack([0.99 * r * unit(0.3), 0.5 * r * unit(2.0)])
    assert satisfies_theorem2([W, np.full((2, 2), 0.3)], X)
    assert not satisfies_theorem2([W, np.diag([0.5, 0.1])], X)  # ‖v_1‖ = ½ is not < ½
    assert not satisfies_theorem2([1.02 * W / 0.99, np.zeros((2, 2))], X)
    lo, hi = theorem2_angle_interval(AUTHORS_THETA, [W, np.zeros((2, 2))])
    assert lo == pytest.approx(np.pi - AUTHORS_THETA)
    assert hi == pytest.approx(AUTHORS_THETA + 2 * np.arcsin(2 * 0.99 * r / np.sqrt(3)))
    # the radius is exactly what keeps the upper end below π (the proof's last step)
    for theta in np.linspace(np.pi / 2 + 1e-3, np.pi - 1e-3, 50):
        r = theorem2_radius(theta)
        assert theorem2_angle_interval(theta, [np.array([[r, 0.0], [0.0, 0.0]])])[1] <= np.pi + 1e-12
        if r < 0.5:
            rr = r * (1 + 1e-6)
            assert theorem2_angle_interval(theta, [np.array([[rr, 0.0], [0.0, 0.0]])])[1] > np.pi


def test_theorem3_closed_forms():
    t = 2 * np.pi / 3
    assert theorem3_bound(t) == pytest.approx(2 / 9, rel=1e-15)
    lo, hi = theorem3_norm_interval(t)
    assert lo == pytest.approx(np.sqrt(3) / 2) and hi == pytest.approx(np.sqrt(0.25 + 16 / 9))
    lo, hi = theorem3_angle_interval(t)
    assert lo == pytest.approx(np.pi / 3) and hi == pytest.approx(5 * np.pi / 6)
    for f in (theorem3_bound, theorem3_norm_interval, theorem3_angle_interval, theorem2_radius):
        with pytest.raises(ValueError, match="theta_x"):
            f(1.0)


def test_sample_theorem3_init():
    W, V = sample_theorem3_init(jax.random.key(0))
    assert W.shape == (2, 2) and V.shape == (2, 2) and not V.any()
    W, V = sample_theorem3_init(jax.random.key(1), batch=20000)
    assert W.shape == (20000, 2, 2) and V.shape == (20000, 2, 2) and not V.any()
    r = np.linalg.norm(W, axis=-1).ravel()
    assert r.max() < 0.5
    # uniform in the disk: P[r < ¼] = ¼; angle uniform
    N, p = r.size, 0.25
    assert abs(np.mean(r < 0.25) - p) < 4 * np.sqrt(p * (1 - p) / N)
    phi = np.arctan2(W[..., 1], W[..., 0]).ravel()
    assert stats.kstest(phi, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > 1e-3
    with pytest.raises(ValueError, match="batch"):
        sample_theorem3_init(jax.random.key(0), batch=0)


@pytest.mark.parametrize("theta", [AUTHORS_THETA, np.radians(100), np.radians(135), np.radians(170)])
def test_theorem3_configuration_probability(theta):
    """P[one neuron in S_1, the other in S_2] = 2(θ_x/2π)², within 4 binomial sigmas."""
    rng = np.random.default_rng(int(np.degrees(theta)))
    phi = rng.uniform(0, 2 * np.pi)
    X = np.stack([unit(phi), unit(phi + theta)])
    W, _ = sample_theorem3_init(jax.random.key(int(np.degrees(theta))), batch=40000)
    P = W @ X.T  # (batch, neuron, point)
    in_S1 = (P[..., 0] > 0) & (P[..., 1] <= 0)
    in_S2 = (P[..., 0] <= 0) & (P[..., 1] > 0)
    hits = (in_S1[:, 0] & in_S2[:, 1]) | (in_S2[:, 0] & in_S1[:, 1])
    p = theorem3_bound(theta)
    assert abs(hits.mean() - p) < 4 * np.sqrt(p * (1 - p) / hits.size)


@pytest.mark.parametrize("theta", [AUTHORS_THETA, np.radians(100), np.radians(135), np.radians(170)])
def test_theorem3_mechanism_on_exact_limits(theta):
    """From S_1 x S_2 starts (V(0) = 0, disk of radius ½): zero loss, norms in Theorem 3's
    interval, angle in Theorem 2's and in s1_s2_angle_interval; Theorem 3's angle upper
    bound, as the paper states it, fails for some of these starts."""
    X = np.stack([unit(0.4), unit(0.4 + theta)])
    Y = np.stack([unit(1.0), unit(2.0)])
    W0s, _ = sample_theorem3_init(jax.random.key(5), batch=6000)
    P = W0s @ X.T
    sel = (P[:, 0, 0] > 0) & (P[:, 0, 1] < 0) & (P[:, 1, 0] < 0) & (P[:, 1, 1] > 0)
    n_lo, n_hi = theorem3_norm_interval(theta)
    a_lo, a_hi = s1_s2_angle_interval(theta)
    lims, angles = [], []
    for W0 in W0s[sel]:
        W, V = s1_s2_limit([W0, np.zeros((2, 2))], X, Y)
        np.testing.assert_allclose(net(W, V, X), Y, atol=1e-13)
        norms = np.linalg.norm(W, axis=1)
        assert np.all((norms > n_lo) & (norms < n_hi))
        ang = np_angle(W[0], W[1])
        assert a_lo <= ang < a_hi + 1e-12
        t2_lo, t2_hi = theorem2_angle_interval(theta, [W0])
        assert t2_lo <= ang < t2_hi
        lims.append(W)
        angles.append(ang)
    angles = np.array(angles)
    t3_lo, t3_hi = theorem3_angle_interval(theta)
    assert np.all(angles >= t3_lo)
    events = theorem3_event([np.array(lims)], X, np.zeros(len(lims)))
    np.testing.assert_array_equal(events, angles <= t3_hi)
    assert np.mean(angles > t3_hi) > 0.005  # the stated upper bound is violated


def test_theorem3_angle_bound_counterexample_by_ode():
    """An explicit S_1 x S_2 start, V(0) = 0, ‖w_i(0)‖ < ½, on the authors' data, whose
    gradient flow (integrated independently) ends outside Theorem 3's angle interval."""
    X, Y = authors_data()
    d1 = np.array([X[0, 1], -X[0, 0]])  # ⊥ x_1, on the S_1/D side
    d2 = np.array([-X[1, 1], X[1, 0]])  # ⊥ x_2, on the S_2/D side
    W0 = np.stack([0.49 * d1 + 0.01 * X[0], 0.49 * d2 + 0.01 * X[1]])
    assert np.all(np.linalg.norm(W0, axis=1) < 0.5)
    assert W0[0] @ X[0] > 0 > W0[0] @ X[1] and W0[1] @ X[1] > 0 > W0[1] @ X[0]
    W, V = flow(W0, np.zeros((2, 2)), X, Y)
    loss = loss_and_grad(W, V, X, Y)[0]
    assert loss < 1e-20
    ang = np_angle(W[0], W[1])
    assert ang > theorem3_angle_interval(AUTHORS_THETA)[1] + np.radians(5)
    assert not theorem3_event([W, V], X, loss)


def test_theorem3_event():
    X, _ = authors_data()
    th = AUTHORS_THETA
    n_lo, n_hi = theorem3_norm_interval(th)
    a_lo, a_hi = theorem3_angle_interval(th)
    mid_n, mid_a = (n_lo + n_hi) / 2, (a_lo + a_hi) / 2

    def W_of(n1, n2, a):
        return np.stack([n1 * unit(0.2), n2 * unit(0.2 + a)])

    V = np.zeros((2, 2))
    assert theorem3_event([W_of(mid_n, mid_n, mid_a), V], X, 0.0)
    assert not theorem3_event([W_of(mid_n, mid_n, mid_a), V], X, 2e-4)  # not converged
    assert theorem3_event([W_of(mid_n, mid_n, mid_a), V], X, 2e-4, loss_tol=1e-3)
    assert not theorem3_event([W_of(0.8, mid_n, mid_a), V], X, 0.0)  # norm below √3/2
    assert not theorem3_event([W_of(mid_n, n_hi * 1.01, mid_a), V], X, 0.0)
    assert not theorem3_event([W_of(mid_n, mid_n, a_lo - 0.01), V], X, 0.0)
    assert not theorem3_event([W_of(mid_n, mid_n, a_hi + 0.01), V], X, 0.0)
    batch = np.stack([W_of(mid_n, mid_n, mid_a), W_of(mid_n, mid_n, a_hi + 0.01), W_of(0.1, mid_n, mid_a)])
    np.testing.assert_array_equal(theorem3_event([batch, None], X, np.zeros(3)), [True, False, False])


# ----------------------------------------------------------------------- rank metrics


def test_rank_metrics_hand_values():
    D = np.diag([3.0, 4.0])
    H = -(4 / 7 * np.log(4 / 7) + 3 / 7 * np.log(3 / 7))
    assert stable_rank(D) == pytest.approx(25 / 16, rel=1e-15)
    assert rank_ratio(D) == pytest.approx(4 / 5, rel=1e-15)
    assert sigma_ratio(D) == pytest.approx(3 / 4, rel=1e-15)
    assert effective_rank(D) == pytest.approx(np.exp(H), rel=1e-14)
    assert dist_to_rank1(D) == pytest.approx(3.0, rel=1e-15)
    assert row_angle(D) == pytest.approx(np.pi / 2)
    assert row_norm_ratio(D) == pytest.approx(3 / 4)

    R1 = np.outer([1.0, -2.0], [3.0, 0.5])  # rank 1, rows antiparallel
    assert stable_rank(R1) == pytest.approx(1.0, abs=1e-14)
    assert rank_ratio(R1) == pytest.approx(1.0, abs=1e-14)
    assert sigma_ratio(R1) < 1e-15
    assert effective_rank(R1) == pytest.approx(1.0, abs=1e-14)
    assert dist_to_rank1(R1) < 1e-14
    assert row_angle(R1) == pytest.approx(np.pi)
    assert row_norm_ratio(R1) == pytest.approx(0.5)

    I3 = np.eye(3)
    assert stable_rank(I3) == pytest.approx(3.0)
    assert effective_rank(I3) == pytest.approx(3.0)
    assert dist_to_rank1(I3) == pytest.approx(np.sqrt(2))
    # a rectangular matrix and a rotation of D (invariance)
    Q = np.array([[np.cos(0.7), -np.sin(0.7)], [np.sin(0.7), np.cos(0.7)]])
    assert stable_rank(Q @ D) == pytest.approx(25 / 16, rel=1e-14)
    assert sigma_ratio(np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])) == pytest.approx(0.5)


def test_rank_metrics_batch():
    batch = np.stack([np.diag([3.0, 4.0]), np.outer([1.0, 2.0], [1.0, 1.0]), np.eye(2)])
    np.testing.assert_allclose(stable_rank(batch), [25 / 16, 1.0, 2.0], rtol=1e-14)
    np.testing.assert_allclose(rank_ratio(batch), [0.8, 1.0, 1 / np.sqrt(2)], rtol=1e-14)
    np.testing.assert_allclose(sigma_ratio(batch), [0.75, 0.0, 1.0], atol=1e-15)
    np.testing.assert_allclose(effective_rank(batch)[1:], [1.0, 2.0], rtol=1e-14)
    np.testing.assert_allclose(dist_to_rank1(batch), [3.0, 0.0, 1.0], atol=1e-15)
    assert np.isnan(stable_rank(np.zeros((2, 2))))
    with pytest.raises(ValueError, match="W"):
        stable_rank(np.ones(3))
