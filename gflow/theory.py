"""The paper's depth-2 constructions, bounds and closed forms (SPEC §4), and rank metrics.

Everything here is small closed-form NumPy; randomness comes only from explicit
``jax.random`` keys. Conventions: ``params = [W, V]`` with ``W`` of shape ``(m, d_in)``
(row ``w_j`` = incoming weights of hidden neuron ``j``) and ``V`` of shape ``(d_out, m)``
(column ``v_j`` = outgoing weights of neuron ``j``); ``X`` of shape ``(n, d_in)`` and
``Y`` of shape ``(n, d_out)`` hold one point / label per row. The loss is
``L = ½ Σ_i ‖V σ(W x_i) − y_i‖²`` with ``σ'(0) = 0``. The two-point setting has
``n = m = d_in = d_out = 2``.

Regions of a first-layer weight vector ``w`` (Definition 1 of the paper):
``D = {w·x_1 ≤ 0, w·x_2 ≤ 0}``, ``S = {w·x_1 > 0, w·x_2 > 0}``,
``S_1 = {w·x_1 > 0, w·x_2 ≤ 0}``, ``S_2 = {w·x_1 ≤ 0, w·x_2 > 0}``.

A finding worth knowing (checked in ``tests/test_theory.py``): the angle upper bound
``3π/4 + (θ_x − π/2)/2`` of Theorem 3 does *not* hold for every initialisation with one
neuron in ``S_1`` and the other in ``S_2``, although the paper's proof sketch says it
does. With ``w_1(0)`` near the ``S_1``/``D`` boundary with norm near ``½`` (and ``w_2(0)``
symmetrically), the exact limit of the flow (:func:`s1_s2_limit`) has
``∠(w_1(∞), w_2(∞)) → θ_x + 2·arctan(½)``, which exceeds the bound for every
``θ_x ∈ (π/2, π)``; for the authors' data about 1.6% of such starts violate it. The
bound that does hold for those starts is :func:`s1_s2_angle_interval`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "angle",
    "authors_data",
    "check_assumptions",
    "dist_to_rank1",
    "effective_rank",
    "lemma2_solution",
    "rank_ratio",
    "row_angle",
    "row_norm_ratio",
    "s1_s2_angle_interval",
    "s1_s2_limit",
    "sample_theorem3_init",
    "sample_two_point_data",
    "satisfies_theorem2",
    "sigma_ratio",
    "singular_values",
    "stable_rank",
    "theorem1_solution",
    "theorem2_angle_interval",
    "theorem2_radius",
    "theorem3_angle_interval",
    "theorem3_bound",
    "theorem3_event",
    "theorem3_norm_interval",
]


# ----------------------------------------------------------------------------- data


def authors_data():
    """The authors' data set: ``x_1 = (1, 0.99)/‖·‖``, ``x_2 = (−1, 0.99)/‖·‖``, ``Y = I_2``.

    ``θ_x = ∠(x_1, x_2) ≈ 90.58°``.

    Returns:
        ``(X, Y)``, both float64 of shape ``(2, 2)``.
    """
    X = np.array([[1.0, 0.99], [-1.0, 0.99]])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.eye(2)


def _uniform(key, shape, lo=0.0, hi=1.0):
    """``jax.random.uniform`` draws as a float64 NumPy array (float32 draws if x64 is off)."""
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
    return np.asarray(jax.random.uniform(key, shape, dtype, lo, hi), dtype=np.float64)


def _unit(phi):
    """Unit vectors at angles ``phi``: shape ``phi.shape + (2,)``."""
    phi = np.asarray(phi, dtype=np.float64)
    return np.stack([np.cos(phi), np.sin(phi)], axis=-1)


def sample_two_point_data(key: jax.Array, theta_x=None):
    """Random two-point data satisfying Assumptions 1–2.

    ``x_1`` is a unit vector at a uniform angle ``φ``, ``x_2`` the unit vector at
    ``φ ± θ_x`` (random sign), so ``∠(x_1, x_2) = θ_x``. ``y_1, y_2`` are unit vectors at
    independent uniform angles, redrawn (with a key derived from ``key``) in the
    probability-zero event that ``|det Y| < 1e-8``.

    Arguments:
        key: a ``jax.random`` key.
        theta_x: the angle between the inputs, a float in ``(π/2, π)``; drawn uniformly
            from that interval when ``None``.

    Returns:
        ``(X, Y)``, both float64 of shape ``(2, 2)``, one point / label per row.
    """
    k_theta, k_phi, k_sign, k_y = jax.random.split(key, 4)
    if theta_x is None:
        theta_x = float(_uniform(k_theta, (), np.pi / 2, np.pi))
    else:
        theta_x = _check_theta_x(theta_x)
    phi = float(_uniform(k_phi, (), 0.0, 2 * np.pi))
    sign = 1.0 if bool(jax.random.bernoulli(k_sign)) else -1.0
    X = _unit(np.array([phi, phi + sign * theta_x]))
    for attempt in range(100):
        Y = _unit(_uniform(jax.random.fold_in(k_y, attempt), (2,), 0.0, 2 * np.pi))
        if abs(np.linalg.det(Y)) >= 1e-8:
            return X, Y
    raise RuntimeError("sample_two_point_data: could not draw linearly independent labels")


def angle(a, b):
    """The angle in ``[0, π]`` between vectors ``a`` and ``b`` (last axis; broadcasts).

    Computed as ``2·atan2(‖â − b̂‖, ‖â + b̂‖)`` with ``â = a/‖a‖``, accurate near 0 and π.

    Raises:
        ValueError: if a vector is zero or not finite.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=-1, keepdims=True)
    nb = np.linalg.norm(b, axis=-1, keepdims=True)
    if not (np.all(np.isfinite(na)) and np.all(na > 0)):
        raise ValueError(f"a: expected non-zero finite vectors, got {a!r}")
    if not (np.all(np.isfinite(nb)) and np.all(nb > 0)):
        raise ValueError(f"b: expected non-zero finite vectors, got {b!r}")
    a, b = a / na, b / nb
    return 2.0 * np.arctan2(np.linalg.norm(a - b, axis=-1), np.linalg.norm(a + b, axis=-1))


def check_assumptions(X, Y, atol=1e-10):
    """Check Assumptions 1–2 of the paper and return ``θ_x = ∠(x_1, x_2)``.

    Assumption 1: ``‖x_i‖ = ‖y_i‖ = 1`` (within ``atol``) and ``y_1, y_2`` linearly
    independent (``|det Y| > atol``). Assumption 2: ``θ_x ∈ (π/2, π)`` strictly.

    Arguments:
        X: inputs, shape ``(2, 2)``.
        Y: labels, shape ``(2, 2)``.

    Returns:
        ``θ_x`` as a float.

    Raises:
        ValueError: naming the first assumption that fails.
    """
    X = _as_matrix(X, "X", (2, 2))
    Y = _as_matrix(Y, "Y", (2, 2))
    nx, ny = np.linalg.norm(X, axis=1), np.linalg.norm(Y, axis=1)
    if np.any(np.abs(nx - 1) > atol):
        raise ValueError(f"X: Assumption 1 expects unit-norm points, got norms {nx}")
    if np.any(np.abs(ny - 1) > atol):
        raise ValueError(f"Y: Assumption 1 expects unit-norm labels, got norms {ny}")
    if abs(np.linalg.det(Y)) <= atol:
        raise ValueError(f"Y: Assumption 1 expects linearly independent labels, got det(Y) = {np.linalg.det(Y)}")
    theta = float(angle(X[0], X[1]))
    if not np.pi / 2 < theta < np.pi:
        raise ValueError(f"X: Assumption 2 expects ∠(x_1, x_2) in (π/2, π), got {theta} rad ({np.degrees(theta)}°)")
    return theta


def _as_matrix(A, name, shape=None):
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or (shape is not None and A.shape != shape) or not np.all(np.isfinite(A)):
        expected = f"shape {shape}" if shape is not None else "a 2-d array"
        raise ValueError(f"{name}: expected a finite float matrix of {expected}, got shape {A.shape}")
    return A


def _check_theta_x(theta_x):
    t = np.asarray(theta_x, dtype=np.float64)
    if not np.all((np.pi / 2 < t) & (t < np.pi)):
        raise ValueError(f"theta_x: expected angles in (π/2, π) (Assumption 2), got {theta_x!r}")
    return float(t) if t.ndim == 0 else t


def _check_two_points(X, Y):
    X = _as_matrix(X, "X")
    Y = _as_matrix(Y, "Y")
    if X.shape[0] != 2 or X.shape[1] < 2:
        raise ValueError(f"X: expected shape (2, d_in) with d_in >= 2, got {X.shape}")
    if Y.shape[0] != 2:
        raise ValueError(f"Y: expected shape (2, d_out), got {Y.shape}")
    return X, Y


def _check_params(params, m, d_in, d_out):
    if len(params) != 2:
        raise ValueError(f"params: expected [W, V], got a sequence of length {len(params)}")
    W = _as_matrix(params[0], "params[0] (W)", (m, d_in))
    V = _as_matrix(params[1], "params[1] (V)", (d_out, m))
    return W, V


# ------------------------------------------------------------------ Theorem 1, Lemma 2


def theorem1_solution(X, Y, c=1.0, w1=None):
    """A zero-loss network with ``rank W = 1`` (Theorem 1).

    ``w_1`` satisfies ``w_1·x_1 > 0 > w_1·x_2`` (default ``x_1/‖x_1‖ − x_2/‖x_2‖``, which
    does for any linearly independent ``x_1, x_2``: ``w_1·x_1 = ‖x_1‖(1 − cos θ_x)`` and
    ``w_1·x_2 = −‖x_2‖(1 − cos θ_x)``), ``w_2 = −c·w_1``. Then
    ``A = σ(W Xᵀ) = diag(w_1·x_1, −c·w_1·x_2)`` is invertible and ``V = Yᵀ A⁻¹`` gives
    ``V σ(W x_i) = y_i`` for both points.

    Arguments:
        X: two linearly independent inputs, shape ``(2, d_in)``, ``d_in ≥ 2``, any norms.
        Y: any labels, shape ``(2, d_out)``.
        c: positive scale of the second neuron.
        w1: optional first neuron, shape ``(d_in,)``, with ``w1·x_1 > 0 > w1·x_2``.

    Returns:
        ``[W, V]``: ``W`` of shape ``(2, d_in)`` and rank 1, ``V`` of shape ``(d_out, 2)``.
    """
    X, Y = _check_two_points(X, Y)
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"c: expected a positive finite float, got {c!r}")
    nx = np.linalg.norm(X, axis=1)
    if np.any(nx == 0) or abs(float(np.dot(X[0], X[1]))) >= nx[0] * nx[1] * (1 - 1e-12):
        raise ValueError(f"X: expected two linearly independent points, got {X!r}")
    if w1 is None:
        w1 = X[0] / nx[0] - X[1] / nx[1]
    else:
        w1 = np.asarray(w1, dtype=np.float64)
        if w1.shape != (X.shape[1],) or not (w1 @ X[0] > 0 > w1 @ X[1]):
            raise ValueError(f"w1: expected shape ({X.shape[1]},) with w1·x_1 > 0 > w1·x_2, got {w1!r}")
    W = np.stack([w1, -c * w1])
    A = np.diag([w1 @ X[0], -c * (w1 @ X[1])])
    return [W, np.linalg.solve(A.T, Y).T]


def lemma2_solution(W, X, Y, rtol=1e-10):
    """Second layer that interpolates when ``σ(W Xᵀ)`` has rank ``n`` (Lemma 2).

    With ``A = σ(W Xᵀ)`` of shape ``(m, n)`` and full column rank, ``A⁺A = I_n``, so
    ``V = Yᵀ A⁺`` gives ``V σ(W Xᵀ) = Yᵀ``. (The paper writes ``V = [Y 0]·[A⁺; 0]``
    with points as columns, which is the same matrix.)

    Arguments:
        W: first layer, shape ``(m, d_in)``.
        X: inputs, shape ``(n, d_in)``.
        Y: labels, shape ``(n, d_out)``.
        rtol: a singular value of ``A`` below ``rtol·σ_max(A)`` counts as zero.

    Returns:
        ``[W, V]`` with ``V`` of shape ``(d_out, m)``.

    Raises:
        ValueError: if ``rank σ(W Xᵀ) < n``.
    """
    W = _as_matrix(W, "W")
    X = _as_matrix(X, "X")
    Y = _as_matrix(Y, "Y")
    if X.shape[1] != W.shape[1] or Y.shape[0] != X.shape[0]:
        raise ValueError(f"W, X, Y: expected shapes (m, d), (n, d), (n, d_out), got {W.shape}, {X.shape}, {Y.shape}")
    A = np.maximum(W @ X.T, 0.0)
    s = np.linalg.svd(A, compute_uv=False)
    n = X.shape[0]
    if s.size < n or s[n - 1] <= rtol * s[0]:
        raise ValueError(f"W: Lemma 2 needs rank σ(W Xᵀ) = n = {n}; singular values of σ(W Xᵀ) are {s}")
    return [W.copy(), Y.T @ np.linalg.pinv(A)]


# ------------------------------------------------------------------------- Theorem 2


def theorem2_radius(theta_x):
    """``min(½, (√3/2)·cos(θ_x/2))``: Theorem 2 needs ``‖w_i(0)‖`` below this (and ``‖v_i(0)‖ < ½``).

    The combined condition is reconstructed from the paper's proof (SPEC §4).
    """
    theta_x = _check_theta_x(theta_x)
    return np.minimum(0.5, np.sqrt(3) / 2 * np.cos(np.asarray(theta_x) / 2))[()]


def satisfies_theorem2(params, X):
    """Whether ``params = [W, V]`` meets Theorem 2's initialisation condition for data ``X``.

    True iff ``‖w_i‖ < theorem2_radius(∠(x_1, x_2))`` and ``‖v_i‖ < ½`` for ``i = 1, 2``.
    ``W, V`` of shape ``(2, 2)``; ``X`` of shape ``(2, 2)``.
    """
    X = _as_matrix(X, "X", (2, 2))
    W, V = _check_params(params, 2, 2, 2)
    r = theorem2_radius(float(angle(X[0], X[1])))
    return bool(np.all(np.linalg.norm(W, axis=1) < r) and np.all(np.linalg.norm(V, axis=0) < 0.5))


def theorem2_angle_interval(theta_x, params0):
    """Theorem 2's interval ``[π − θ_x, θ_x + 2·arcsin(2·max_i‖w_i(0)‖/√3))`` for ``∠(w_1(∞), w_2(∞))``.

    Arguments:
        theta_x: ``∠(x_1, x_2)`` in ``(π/2, π)``.
        params0: initial ``[W, V]``; only the rows of ``W`` (shape ``(2, d_in)``) are used.

    Returns:
        ``(lo, hi)``, closed at ``lo`` and open at ``hi``.
    """
    theta_x = _check_theta_x(theta_x)
    W = _as_matrix(params0[0], "params0[0] (W)")
    r = float(np.max(np.linalg.norm(W, axis=1)))
    if 2 * r / np.sqrt(3) > 1:
        raise ValueError(f"params0: expected max_i ‖w_i(0)‖ <= √3/2 for the arcsin to exist, got {r}")
    return np.pi - theta_x, theta_x + 2 * np.arcsin(2 * r / np.sqrt(3))


# ------------------------------------------------------------------------- Theorem 3


def theorem3_bound(theta_x):
    """``2·(θ_x/2π)²``: Theorem 3's lower bound on ``P[E]``.

    It is exactly the probability, for ``w_1(0), w_2(0)`` i.i.d. from a rotation-invariant
    law, that one lies in ``S_1`` and the other in ``S_2`` (each cone has width ``θ_x``).
    """
    theta_x = _check_theta_x(theta_x)
    return 2.0 * (np.asarray(theta_x) / (2 * np.pi)) ** 2


def theorem3_norm_interval(theta_x):
    """Theorem 3's open interval ``(√3/2, √(¼ + 4/(3 sin²θ_x)))`` for ``‖w_i(∞)‖``."""
    theta_x = _check_theta_x(theta_x)
    return np.sqrt(3) / 2, np.sqrt(0.25 + 4 / (3 * np.sin(np.asarray(theta_x)) ** 2))


def theorem3_angle_interval(theta_x):
    """Theorem 3's closed interval ``[π − θ_x, 3π/4 + (θ_x − π/2)/2]`` for ``∠(w_1(∞), w_2(∞))``.

    As stated in the paper. It fails for some starts of the mechanism the proof relies on
    (module docstring); compare :func:`s1_s2_angle_interval`.
    """
    theta_x = _check_theta_x(theta_x)
    return np.pi - np.asarray(theta_x), 3 * np.pi / 4 + (np.asarray(theta_x) - np.pi / 2) / 2


def theorem3_event(params_final, X, final_loss, loss_tol=1e-4):
    """Whether a final network lies in Theorem 3's event ``E``.

    ``E``: the loss is at most ``loss_tol`` (a stand-in for "converged to zero loss";
    ``final_loss`` is taken in whatever normalisation the caller used),
    ``∠(w_1, w_2) ∈`` :func:`theorem3_angle_interval` (closed) and both ``‖w_i‖ ∈``
    :func:`theorem3_norm_interval` (open).

    Arguments:
        params_final: ``[W, V]``; ``W`` of shape ``(..., 2, 2)`` (leading batch axes allowed).
        X: inputs, shape ``(2, 2)``, with ``∠(x_1, x_2) ∈ (π/2, π)``.
        final_loss: float or array broadcastable to the batch shape.
        loss_tol: non-negative tolerance on the loss.

    Returns:
        A bool (no batch axes) or a bool array of the batch shape.
    """
    X = _as_matrix(X, "X", (2, 2))
    W = np.asarray(params_final[0], dtype=np.float64)
    if W.ndim < 2 or W.shape[-2:] != (2, 2):
        raise ValueError(f"params_final[0] (W): expected shape (..., 2, 2), got {W.shape}")
    if not loss_tol >= 0:
        raise ValueError(f"loss_tol: expected a non-negative float, got {loss_tol!r}")
    theta = float(angle(X[0], X[1]))
    a_lo, a_hi = theorem3_angle_interval(theta)
    n_lo, n_hi = theorem3_norm_interval(theta)
    norms = np.linalg.norm(W, axis=-1)
    ok = np.asarray(final_loss, dtype=np.float64) <= loss_tol
    ok = ok & np.all((norms > n_lo) & (norms < n_hi), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        nonzero = np.all(norms > 0, axis=-1)
        w1 = W[..., 0, :] / norms[..., 0:1]
        w2 = W[..., 1, :] / norms[..., 1:2]
        ang = 2.0 * np.arctan2(np.linalg.norm(w1 - w2, axis=-1), np.linalg.norm(w1 + w2, axis=-1))
    ok = ok & nonzero & (ang >= a_lo) & (ang <= a_hi)
    return bool(ok) if np.ndim(ok) == 0 else ok


def sample_theorem3_init(key: jax.Array, batch=None, radius=0.5, d_out=2):
    """Theorem 3's initialisation: ``w_1, w_2`` i.i.d. uniform in the disk of radius ``radius``, ``V = 0``.

    Uniform in the disk: radius ``radius·√U``, angle uniform in ``[0, 2π)``.

    Arguments:
        key: a ``jax.random`` key.
        batch: ``None`` or an int, the size of a leading batch axis.
        radius: disk radius (the paper's ``½``).
        d_out: output dimension (rows of ``V``).

    Returns:
        ``[W, V]`` as float64 NumPy arrays, ``W`` of shape ``(2, 2)`` and ``V`` of shape
        ``(d_out, 2)``, or ``(batch, 2, 2)`` and ``(batch, d_out, 2)``.
    """
    if batch is not None and not (isinstance(batch, (int, np.integer)) and batch >= 1):
        raise ValueError(f"batch: expected None or a positive int, got {batch!r}")
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius: expected a positive finite float, got {radius!r}")
    shape = () if batch is None else (int(batch),)
    k_r, k_phi = jax.random.split(key)
    r = radius * np.sqrt(_uniform(k_r, shape + (2,)))
    W = r[..., None] * _unit(_uniform(k_phi, shape + (2,), 0.0, 2 * np.pi))
    return [W, np.zeros(shape + (int(d_out), 2))]


# ----------------------------------------------------- exact limit from S_1 x S_2 starts


def s1_s2_limit(params0, X, Y, vtol=1e-12):
    """Exact limit ``[W(∞), V(∞)]`` of gradient flow from a start with one neuron in each ``S_i``.

    Premise (checked; ``ValueError`` otherwise): each neuron ``j`` is active on exactly
    one point ``i = π(j)`` (``w_j·x_i > 0``), strictly inactive on the other point
    ``o`` (``w_j·x_o < 0``), the two neurons use different points, ``v_j(0) = b_0 y_i`` is
    parallel to its label (``V(0) = 0`` is the paper's case), and the whole path below
    stays inside the cone. Any norms of ``x_i, y_i`` (non-zero), any ``d_in``, ``d_out``.

    Derivation. While neuron ``j`` is active only on ``x_i`` and neuron ``3−j`` only on
    ``x_o``, the loss splits as ``½‖r_1‖² + ½‖r_2‖²`` with residual
    ``r_i = (w_j·x_i) v_j − y_i`` depending only on neuron ``j``, so

        ẇ_j = −(v_j·r_i) x_i,    v̇_j = −(w_j·x_i) r_i.

    Hence ``w_j`` moves only along ``x_i`` and, ``v_j(0)`` being parallel to ``y_i``,
    ``v_j = b y_i`` for all time. With ``u = w_j·x_i``, ``α = ‖x_i‖²``, ``β = ‖y_i‖²``,
    ``r_i = (bu − 1) y_i`` and

        u̇ = −αβ·b(bu − 1),    ḃ = −u(bu − 1),

    so ``d/dt (u² − αβ b²) = 0``: ``C = u_0² − αβ b_0²`` is conserved (this is
    ``α(‖w_j‖² − ‖v_j‖²)`` up to the constant part of ``w_j`` orthogonal to ``x_i``). In
    the quadrant ``u > 0, b ≥ 0`` the flow runs monotonically along the hyperbola
    ``u² − αβb² = C`` to the equilibrium curve ``bu = 1`` (both ``u`` and ``b`` grow while
    ``bu < 1``, both shrink while ``bu > 1``). If ``b_0 < 0``, ``u`` first decreases to
    ``√C`` where ``b = 0`` (needs ``C > 0``, else ``u`` hits 0 and the neuron dies), then
    proceeds as before. At the limit ``u∞² − αβ/u∞² = C``:

        u∞² = (C + √(C² + 4αβ))/2,   w_j(∞) = w_j(0) + (u∞ − u_0) x_i/α,   v_j(∞) = y_i/u∞.

    (For unit norms and ``V(0) = 0``: ``u∞² = (u_0² + √(u_0⁴ + 4))/2``.) The premise holds
    along the path iff ``w_j·x_o < 0`` at the extreme values of ``u`` visited
    (``u_0``, ``u∞`` and ``√C`` when ``b_0 < 0``), because ``w_j·x_o`` is affine in ``u``
    along the path. With ``x_1·x_2 < 0`` (Assumption 2) and ``V(0) = 0``, ``u`` only grows
    and ``w_j·x_o`` only decreases, so the path never leaves the cone.

    Arguments:
        params0: ``[W, V]``, ``W`` of shape ``(2, d_in)``, ``V`` of shape ``(d_out, 2)``.
        X: inputs, shape ``(2, d_in)``.
        Y: labels, shape ``(2, d_out)``, non-zero rows.
        vtol: relative tolerance for ``v_j(0)`` to count as parallel to ``y_i``.

    Returns:
        ``[W(∞), V(∞)]`` of the shapes of ``params0``; the limit loss is exactly 0.
    """
    X, Y = _check_two_points(X, Y)
    W0, V0 = _check_params(params0, 2, X.shape[1], Y.shape[1])
    alpha = np.sum(X**2, axis=1)
    beta = np.sum(Y**2, axis=1)
    if np.any(beta == 0):
        raise ValueError(f"Y: expected non-zero labels, got {Y!r}")
    P = W0 @ X.T  # P[j, i] = w_j·x_i
    assigned = []
    for j in range(2):
        active = np.flatnonzero(P[j] > 0)
        if active.size != 1 or P[j, 1 - active[0]] >= 0:
            raise ValueError(
                f"params0: neuron {j} must be strictly inside S_1 or S_2 (w·x_i > 0 > w·x_o), "
                f"got pre-activations w_{j + 1}·x = {P[j]}"
            )
        assigned.append(int(active[0]))
    if assigned[0] == assigned[1]:
        raise ValueError(
            f"params0: both neurons are active only on x_{assigned[0] + 1}; expected one in S_1, one in S_2"
        )
    W, V = W0.copy(), np.empty_like(V0)
    for j, i in enumerate(assigned):
        o = 1 - i
        v0, y = V0[:, j], Y[i]
        b0 = float(v0 @ y) / beta[i]
        if np.linalg.norm(v0 - b0 * y) > vtol * max(1.0, np.linalg.norm(v0)):
            raise ValueError(f"params0: v_{j + 1}(0) = {v0} must be parallel to y_{i + 1} = {y} (e.g. V(0) = 0)")
        ab = alpha[i] * beta[i]
        u0 = P[j, i]
        C = u0**2 - ab * b0**2
        if b0 < 0 and C <= 0:
            raise ValueError(
                f"params0: neuron {j + 1} dies (u reaches 0 since v_{j + 1}(0)·y_{i + 1} < 0 and C = {C} <= 0)"
            )
        disc = np.sqrt(C**2 + 4 * ab)
        u_inf = np.sqrt((C + disc) / 2 if C >= 0 else 2 * ab / (disc - C))
        visited = [u0, u_inf] + ([np.sqrt(C)] if b0 < 0 else [])
        for u in visited:
            if (W0[j] + (u - u0) * X[i] / alpha[i]) @ X[o] >= 0:
                raise ValueError(f"params0: the path of neuron {j + 1} leaves its cone (w·x_{o + 1} >= 0 at u = {u})")
        W[j] = W0[j] + (u_inf - u0) * X[i] / alpha[i]
        V[:, j] = y / u_inf
    return [W, V]


def s1_s2_angle_interval(theta_x, radius=0.5):
    """Interval ``[π − θ_x, min(π, θ_x + 2·arctan(radius))]`` holding ``∠(w_1(∞), w_2(∞))``
    for Theorem 3's mechanism: unit-norm data with ``∠(x_1, x_2) = θ_x``, ``V(0) = 0`` and
    ``w_1(0), w_2(0)`` in different cones ``S_1, S_2`` with norms ``< radius``.

    Why: ``w_i(∞) = p_i + u∞ x_i`` with ``p_i ⊥ x_i``, ``‖p_i‖ ≤ ‖w_i(0)‖ < radius`` and
    ``u∞ ≥ 1``, so ``∠(w_i(∞), x_i) < arctan(radius)``; and ``w_i(∞)`` stays in its cone,
    whose edge nearest the other cone gives the lower end. The upper end is attained in
    the limit ``w_i(0) → radius`` times the ``S_i``/``D`` edge.
    """
    theta_x = _check_theta_x(theta_x)
    return np.pi - np.asarray(theta_x), np.minimum(np.pi, np.asarray(theta_x) + 2 * np.arctan(radius))


# ----------------------------------------------------------------------- rank metrics


def singular_values(W):
    """Singular values in decreasing order, shape ``(..., min(p, q))`` for ``W`` of shape ``(..., p, q)``."""
    W = np.asarray(W, dtype=np.float64)
    if W.ndim < 2:
        raise ValueError(f"W: expected a matrix or a batch of matrices (..., p, q), got shape {W.shape}")
    return np.linalg.svd(W, compute_uv=False)


def stable_rank(W):
    """``‖W‖_F² / ‖W‖_σ²`` in ``[1, rank W]``; NaN for a zero matrix. Batch axes allowed."""
    s = singular_values(W)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(s**2, axis=-1) / s[..., 0] ** 2


def rank_ratio(W):
    """``r(W) = ‖W‖_σ / ‖W‖_F`` in ``(0, 1]``, 1 iff ``rank W = 1``; NaN for a zero matrix."""
    s = singular_values(W)
    with np.errstate(invalid="ignore", divide="ignore"):
        return s[..., 0] / np.sqrt(np.sum(s**2, axis=-1))


def sigma_ratio(W):
    """``σ_min / σ_max`` over the ``min(p, q)`` singular values; NaN for a zero matrix."""
    s = singular_values(W)
    with np.errstate(invalid="ignore", divide="ignore"):
        return s[..., -1] / s[..., 0]


def effective_rank(W):
    """Effective rank ``exp(H(σ/Σσ))`` (Roy & Vetterli 2007), with ``0·log 0 = 0``; NaN for zero."""
    s = singular_values(W)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = s / np.sum(s, axis=-1, keepdims=True)
        plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
        plogp = np.where(np.isnan(p), np.nan, plogp)
    return np.exp(-np.sum(plogp, axis=-1))


def dist_to_rank1(W):
    """Frobenius distance to the nearest rank-≤1 matrix, ``√(Σ_{i≥2} σ_i²)``."""
    s = singular_values(W)
    return np.sqrt(np.sum(s[..., 1:] ** 2, axis=-1))


def row_angle(W):
    """Angle in ``[0, π]`` between the two rows of ``W`` of shape ``(..., 2, q)``."""
    W = np.asarray(W, dtype=np.float64)
    if W.ndim < 2 or W.shape[-2] != 2:
        raise ValueError(f"W: expected shape (..., 2, q), got {W.shape}")
    return angle(W[..., 0, :], W[..., 1, :])


def row_norm_ratio(W):
    """``min_i ‖w_i‖ / max_i ‖w_i‖`` for the two rows of ``W`` of shape ``(..., 2, q)``; NaN if both are 0."""
    W = np.asarray(W, dtype=np.float64)
    if W.ndim < 2 or W.shape[-2] != 2:
        raise ValueError(f"W: expected shape (..., 2, q), got {W.shape}")
    n = np.linalg.norm(W, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.min(n, axis=-1) / np.max(n, axis=-1)


# =============================================================================
# Deep networks (SPEC §5): Theorems 4 and 5
# =============================================================================
#
# Conventions: ``params = [W_1, ..., W_k]``, ``W_l`` of shape ``(d_l, d_{l-1})``,
# ``N(x) = W_k σ(W_{k-1} ··· σ(W_1 x))`` with scalar output (``d_k = 1``); ``X`` of shape
# ``(n, d_0)`` and ``Y`` of shape ``(n, 1)`` (or ``(n,)``). ``r(W) = ‖W‖_σ / ‖W‖_F``
# (:func:`rank_ratio`). ``k`` is the depth of the shallow net ``N``, ``k'`` (``k_prime``)
# the depth of the deep nets over which the theorems minimise ``‖θ‖²``.
#
# Both proofs share one inequality chain. For *any* depth-``k'`` net ``θ`` with
# ``|N_θ(x_i)| ≥ 1`` at some ``‖x_i‖ ≤ 1``:
#
#     (1/k') Σ_j r(W_j) ≥ (Π_j r(W_j))^{1/k'}                         (AM-GM)
#                       = (Π_j ‖W_j‖_σ)^{1/k'} / (Π_j ‖W_j‖_F)^{1/k'}
#                       ≥ 1 / (Π_j ‖W_j‖_F)^{1/k'}                     (1 ≤ |N_θ(x_i)| ≤ Π_j ‖W_j‖_σ)
#                       ≥ √(k' / ‖θ‖²)                                 (geometric ≤ quadratic mean)
#
# so every interpolating (Thm 4) or margin-1 (Thm 5) net with ``‖θ‖² ≤ ‖θ'‖²`` obeys the
# bound, ``θ*`` in particular. (The paper goes through the balance of ``θ*``,
# ``‖W*_j‖_F = B*``, which gives the same last line.) Each theorem then builds one feasible
# deep net ``θ'`` from ``N`` and bounds ``‖θ'‖²``: the bound is ``√(k' / max ‖θ'‖²)``.

__all__ += [
    "RatioSummary",
    "TeacherData",
    "check_theorem4_assumptions",
    "check_theorem5_assumptions",
    "layer_ratios",
    "ratio_summary",
    "rebalance",
    "shallow_B",
    "teacher_data",
    "theorem4_bound",
    "theorem4_network",
    "theorem4_norm_sq",
    "theorem5_bound",
    "theorem5_network",
    "theorem5_norm_sq",
]


# -------------------------------------------------------------------------- bounds


def theorem4_bound(k, k_prime, B, harmonic=False):
    """Theorem 4 (square loss, minimum norm): ``(1/k') Σ_j r(W*_j) ≥ (1/B)^{k/k'}`` (Eq. 3).

    Hypotheses: ``y_i ≥ 0``, some ``‖x_i‖ ≤ 1`` has ``y_i ≥ 1``; a depth-``k`` width-``m``
    net ``N`` interpolates with ``‖W_j‖_F ≤ B``; ``θ*`` minimises ``‖θ‖²`` among
    interpolating nets of depth ``k' > k`` and width ``m' ≥ m``.

    Derivation (the paper's proof): with ``α = (1/B)^{(k'−k)/k'}`` and ``β = B^{k/k'}``,
    :func:`theorem4_network` builds an interpolating ``θ'`` whose layer norms are all
    ``≤ αB = β = B^{k/k'}``, so ``‖θ*‖² ≤ ‖θ'‖² ≤ k'·B^{2k/k'}`` (:func:`theorem4_norm_sq`)
    and the chain of the section comment gives ``(1/k') Σ_j r(W*_j) ≥ √(k'/‖θ'‖²) ≥
    B^{−k/k'}``. Rebalancing ``θ'`` cannot improve the constant: its layers are already
    balanced when ``N`` is.

    Arguments:
        k: depth of ``N``, an integer ``≥ 1`` (or an integer array; all arguments broadcast).
        k_prime: depth ``k' > k``.
        B: bound on the layer norms of ``N``, ``≥ 1`` (the hypotheses force it:
            ``1 ≤ y_i = N(x_i) ≤ ‖x_i‖·Π_j ‖W_j‖_σ ≤ B^k``).
        harmonic: return Eq. 4 instead, the upper bound ``B^{k/k'}`` on the harmonic mean
            of ``1/r(W*_j) = ‖W*_j‖_F/‖W*_j‖_σ``, which is ``1/(1/k') Σ_j r(W*_j)``.

    Returns:
        A float (or an array of the broadcast shape).
    """
    k, k_prime, B = _check_bound_args(k, k_prime, B, B_min=1.0)
    bound = B ** (-k / k_prime)
    return (1.0 / bound if harmonic else bound)[()]


def theorem5_bound(k, k_prime, B, harmonic=False):
    """Theorem 5 (max margin): ``(1/k') Σ_j r(W*_j) ≥ √(k'/(2(k'+1)))·(√2/B)^{k/k'}`` (Eq. 7).

    Hypotheses: ``y_i ∈ {±1}``, some ``‖x_i‖ ≤ 1``; a depth-``k`` width-``m`` net ``N``
    has ``y_i N(x_i) ≥ 1`` for all ``i`` and ``‖W_j‖_F ≤ B``; ``θ*`` minimises ``‖θ‖²``
    subject to ``y_i N_θ(x_i) ≥ 1`` over nets of depth ``k' > k`` and width
    ``m' ≥ max(m, 2)``. The bound tends to ``1/√2`` as ``k' → ∞``.

    Derivation (re-derived from the paper's proof; it confirms SPEC §5's reconstructed
    constant). Let ``α = (√2/B)^{(k'−k)/k'}``, ``β = (√2/B)^{−k/k'}``, so
    ``α^k β^{k'−k} = 1``, and let ``u`` be the output row ``W_k`` of ``N``.
    :func:`theorem5_network` takes ``W'_i = αW_i`` (``i < k``), ``W'_k = α[u; −u]``,
    ``W'_i = βI_2`` (``k < i < k'``) and ``W'_{k'} = β(1, −1)``, so that
    ``N'(x) = β^{k'−k}(σ(α^k N(x)) − σ(−α^k N(x))) = N(x)``. Its layer norms are
    ``≤ αB`` (``i < k``), ``√2·α‖u‖ ≤ √2·αB`` (``i = k``) and ``√2·β`` (``i > k``), and
    ``(αB)² = (√2β)² = 2^{(k'−k)/k'} B^{2k/k'} =: c``. Hence
    ``‖θ*‖² ≤ ‖θ'‖² ≤ (k−1)c + 2c + (k'−k)c = (k'+1)c`` (:func:`theorem5_norm_sq`), and the
    chain of the section comment (with ``|N*(x_i)| ≥ y_i N*(x_i) ≥ 1``) gives
    ``(1/k') Σ_j r(W*_j) ≥ √(k'/((k'+1)c)) = √(k'/(2(k'+1)))·(√2/B)^{k/k'}``.

    The constant is the proof's, not the best this construction gives: rebalancing ``θ'``
    (same function, ``‖θ‖² = k'·(Π_j ‖W'_j‖_F)^{2/k'} ≤ k'·2^{1/k'}·c``) yields
    ``2^{−1/(2k')}/√2·(√2/B)^{k/k'}``, larger by the factor
    ``√((k'+1)/k')·2^{−1/(2k')} ∈ (1, 1.03]``; this function returns the paper's.

    Arguments:
        k, k_prime, B, harmonic: as in :func:`theorem4_bound` (``B ≥ 1`` again:
            ``1 ≤ |N(x_i)| ≤ B^k``); ``harmonic=True`` returns Eq. 8, the reciprocal.

    Returns:
        A float (or an array of the broadcast shape).
    """
    k, k_prime, B = _check_bound_args(k, k_prime, B, B_min=1.0)
    bound = np.sqrt(k_prime / (2.0 * (k_prime + 1))) * (np.sqrt(2.0) / B) ** (k / k_prime)
    return (1.0 / bound if harmonic else bound)[()]


def theorem4_norm_sq(k, k_prime, B):
    """``k'·B^{2k/k'}``: Theorem 4's bound on ``‖θ'‖²``, hence on ``‖θ*‖²``.

    Attained by :func:`theorem4_network` when every layer of ``N`` has norm ``B``. Any
    interpolating depth-``k'`` net with ``‖θ‖²`` at most this obeys :func:`theorem4_bound`.
    Arguments as in :func:`theorem4_bound` except that any ``B > 0`` is accepted.
    """
    k, k_prime, B = _check_bound_args(k, k_prime, B, B_min=0.0)
    return (k_prime * B ** (2.0 * k / k_prime))[()]


def theorem5_norm_sq(k, k_prime, B):
    """``(k'+1)·2^{(k'−k)/k'}·B^{2k/k'}``: Theorem 5's bound on ``‖θ'‖²``, hence on ``‖θ*‖²``.

    Attained by :func:`theorem5_network` when every layer of ``N`` has norm ``B``. Any
    depth-``k'`` net with margins ``≥ 1`` and ``‖θ‖²`` at most this obeys
    :func:`theorem5_bound`. Arguments as in :func:`theorem4_bound`, any ``B > 0``.
    """
    k, k_prime, B = _check_bound_args(k, k_prime, B, B_min=0.0)
    return ((k_prime + 1) * 2.0 ** ((k_prime - k) / k_prime) * B ** (2.0 * k / k_prime))[()]


def _check_bound_args(k, k_prime, B, B_min):
    k = np.asarray(k)
    k_prime = np.asarray(k_prime)
    B = np.asarray(B, dtype=np.float64)
    if not (_is_integral(k) and np.all(k >= 1)):
        raise ValueError(f"k: expected an integer depth >= 1, got {k.tolist()!r}")
    if not (_is_integral(k_prime) and np.all(k_prime > k)):
        raise ValueError(f"k_prime: expected an integer depth k' > k = {k.tolist()!r}, got {k_prime.tolist()!r}")
    if B_min > 0 and not (np.all(np.isfinite(B)) and np.all(B >= B_min)):
        raise ValueError(
            f"B: expected a finite bound B >= 1 on the layer norms of N (the hypotheses force it: "
            f"1 <= |N(x_i)| <= ‖x_i‖·Π_j ‖W_j‖_σ <= B^k), got {B.tolist()!r}"
        )
    if not (np.all(np.isfinite(B)) and np.all(B > 0)):
        raise ValueError(f"B: expected a positive finite bound on the layer norms, got {B.tolist()!r}")
    return k.astype(np.float64), k_prime.astype(np.float64), B


def _is_integral(a):
    return a.dtype != bool and np.issubdtype(a.dtype, np.number) and np.all(np.isfinite(a)) and np.all(a == np.round(a))


# -------------------------------------------------------------------- constructions


def theorem4_network(params, k_prime, B=None, width=None):
    """The deep net ``N'`` of Theorem 4's proof: depth ``k'``, ``N'(x) = σ(N(x))``.

    With ``α = (1/B)^{(k'−k)/k'}`` and ``β = B^{k/k'}`` (``α^k β^{k'−k} = 1``):
    ``W'_i = α W_i`` for ``i ≤ k`` and ``W'_i = [[β]]`` (1×1) for ``k < i ≤ k'``. Layer
    ``k`` of ``N'`` is a hidden neuron computing ``σ(α^k N(x))``, so ``N'`` agrees with
    ``N`` wherever ``N(x) ≥ 0``, in particular on Theorem 4's data. Layer norms:
    ``α‖W_i‖_F ≤ αB = β`` for ``i ≤ k``, ``β`` for ``i > k``; ``‖θ'‖² ≤ k'β²``
    (:func:`theorem4_norm_sq`), with equality when all layers of ``N`` have norm ``B``
    (e.g. after :func:`rebalance`).

    Arguments:
        params: ``N = [W_1, ..., W_k]`` with scalar output, ``W_k`` of shape ``(1, d_{k-1})``.
        k_prime: depth ``k' > k`` of ``N'``.
        B: the theorem's bound ``‖W_j‖_F ≤ B``; default ``max_j ‖W_j‖_F``. Use
            ``theorem4_network(rebalance(params), ...)`` for the smallest, :func:`shallow_B`.
        width: optional ``m'``: zero-pad every hidden layer of ``N'`` to ``m'`` neurons
            (padding changes neither the function, nor the norms, nor the ratios).

    Returns:
        ``[W'_1, ..., W'_{k'}]`` as float64 NumPy arrays.
    """
    Ws, k_prime, B = _check_construction(params, k_prime, B)
    k = len(Ws)
    alpha = B ** (-(k_prime - k) / k_prime)
    beta = B ** (k / k_prime)
    deep = [alpha * W for W in Ws] + [np.full((1, 1), beta) for _ in range(k_prime - k)]
    return _pad_hidden(deep, width)


def theorem5_network(params, k_prime, B=None, width=None):
    """The deep net ``N'`` of Theorem 5's proof: depth ``k'``, ``N'(x) = N(x)`` for every ``x``.

    With ``α = (√2/B)^{(k'−k)/k'}``, ``β = (√2/B)^{−k/k'}`` and ``u = W_k`` (the output
    row of ``N``): ``W'_i = α W_i`` (``i < k``), ``W'_k = α[u; −u]`` (two neurons computing
    ``σ(±α^k N(x))``), ``W'_i = β I_2`` (``k < i < k'``), ``W'_{k'} = β(1, −1)``. Layer
    norms: ``α‖W_i‖_F``, ``√2·α‖u‖``, then ``√2·β``; ``‖θ'‖² ≤`` :func:`theorem5_norm_sq`
    with equality when all layers of ``N`` have norm ``B``. Derivation in
    :func:`theorem5_bound`.

    Arguments:
        params, k_prime, B: as in :func:`theorem4_network`.
        width: optional ``m' ≥ max(m, 2)``: zero-pad every hidden layer to ``m'`` neurons.

    Returns:
        ``[W'_1, ..., W'_{k'}]`` as float64 NumPy arrays; hidden widths
        ``d_1, ..., d_{k-1}, 2, ..., 2``.
    """
    Ws, k_prime, B = _check_construction(params, k_prime, B)
    k = len(Ws)
    alpha = (np.sqrt(2.0) / B) ** ((k_prime - k) / k_prime)
    beta = (np.sqrt(2.0) / B) ** (-k / k_prime)
    u = Ws[-1]
    deep = [alpha * W for W in Ws[:-1]] + [alpha * np.vstack([u, -u])]
    deep += [beta * np.eye(2) for _ in range(k_prime - k - 1)] + [beta * np.array([[1.0, -1.0]])]
    return _pad_hidden(deep, width)


def _check_chain(params, name="params"):
    """``params`` as a list of float64 matrices with chained shapes."""
    if isinstance(params, np.ndarray) or len(params) < 1:
        raise ValueError(f"{name}: expected a non-empty list [W_1, ..., W_k] of matrices, got {type(params).__name__}")
    Ws = [_as_matrix(W, f"{name}[{j}]") for j, W in enumerate(params)]
    for j in range(1, len(Ws)):
        if Ws[j].shape[1] != Ws[j - 1].shape[0]:
            raise ValueError(
                f"{name}[{j}]: expected {Ws[j - 1].shape[0]} columns to follow {name}[{j - 1}] of shape "
                f"{Ws[j - 1].shape}, got shape {Ws[j].shape}"
            )
    return Ws


def _check_scalar_net(params, name="params"):
    Ws = _check_chain(params, name)
    if Ws[-1].shape[0] != 1:
        raise ValueError(f"{name}[{len(Ws) - 1}]: expected a scalar output, shape (1, d), got shape {Ws[-1].shape}")
    return Ws


def _check_construction(params, k_prime, B):
    Ws = _check_scalar_net(params)
    k = len(Ws)
    if not (isinstance(k_prime, (int, np.integer)) and not isinstance(k_prime, bool) and k_prime > k):
        raise ValueError(f"k_prime: expected an integer depth k' > k = {k}, got {k_prime!r}")
    norms = np.array([np.linalg.norm(W) for W in Ws])
    if B is None:
        B = float(np.max(norms))
    # 1e-12 relative slack: a rebalanced net's norms equal shallow_B only to round-off.
    if not (np.isfinite(B) and B > 0 and B >= np.max(norms) * (1 - 1e-12)):
        raise ValueError(
            f"B: expected a finite bound B >= max_j ‖W_j‖_F = {np.max(norms)} (> 0) on the layer norms, got {B!r}"
        )
    return Ws, int(k_prime), float(B)


def _pad_hidden(Ws, width):
    if width is None:
        return Ws
    needed = max(W.shape[0] for W in Ws[:-1])
    if not (isinstance(width, (int, np.integer)) and not isinstance(width, bool) and width >= needed):
        raise ValueError(f"width: expected an integer m' >= {needed} (the widest hidden layer of N'), got {width!r}")
    out = []
    for j, W in enumerate(Ws):
        rows = W.shape[0] if j == len(Ws) - 1 else width
        cols = W.shape[1] if j == 0 else width
        P = np.zeros((rows, cols))
        P[: W.shape[0], : W.shape[1]] = W
        out.append(P)
    return out


def _net(Ws, X):
    """``N(x_i)`` for each row of ``X`` (plain NumPy): shape ``(n, d_k)``."""
    h = X
    for W in Ws[:-1]:
        h = np.maximum(h @ W.T, 0.0)
    return h @ Ws[-1].T


# ---------------------------------------------------------------------- rebalancing


def _layer_norms(params, name="params"):
    if isinstance(params, np.ndarray) or len(params) < 1:
        raise ValueError(f"{name}: expected a non-empty list [W_1, ..., W_k] of matrices, got {type(params).__name__}")
    Ws = [np.asarray(W, dtype=np.float64) for W in params]
    for j, W in enumerate(Ws):
        if W.ndim < 2:
            raise ValueError(f"{name}[{j}]: expected a matrix (..., d_l, d_(l-1)), got shape {W.shape}")
    return Ws, np.stack(np.broadcast_arrays(*[np.linalg.norm(W, axis=(-2, -1)) for W in Ws]), axis=-1)


def shallow_B(params):
    """The smallest ``B`` with ``‖W_j‖_F ≤ B`` over layer rescalings of ``params``: ``(Π_j ‖W_j‖_F)^{1/k}``.

    Rescaling ``W_j → c_j W_j`` with ``Π_j c_j = 1`` (``c_j > 0``) keeps the function
    (positive homogeneity); ``max_j c_j‖W_j‖_F ≥ (Π_j c_j‖W_j‖_F)^{1/k}`` with equality iff
    all norms are equal, which :func:`rebalance` achieves. (Rescaling single neurons,
    incoming by ``c`` and outgoing by ``1/c``, can lower it further; not done here.)

    Arguments:
        params: ``[W_1, ..., W_k]``; leading batch axes allowed.

    Returns:
        The geometric mean of the layer norms: a float, or an array of the batch shape.
    """
    _, norms = _layer_norms(params)
    with np.errstate(divide="ignore"):
        return np.exp(np.mean(np.log(norms), axis=-1))[()]


def rebalance(params):
    """The same function with every layer norm equal to :func:`shallow_B`.

    ``W_j → (b/‖W_j‖_F)·W_j`` with ``b = (Π_l ‖W_l‖_F)^{1/k}``; the factors multiply to 1,
    so by positive homogeneity the outputs are unchanged (to round-off). Ratios
    ``r(W_j)`` are unchanged too, and ``‖θ‖²`` drops to ``k·b²``, the least over layer
    rescalings (geometric ≤ quadratic mean).

    Arguments:
        params: ``[W_1, ..., W_k]``; leading batch axes allowed.

    Returns:
        A new list of float64 NumPy arrays.

    Raises:
        ValueError: if a layer is zero (the net is then identically zero).
    """
    Ws, norms = _layer_norms(params)
    if not (np.all(np.isfinite(norms)) and np.all(norms > 0)):
        raise ValueError(f"params: rebalancing needs finite non-zero layers, got layer norms {norms.tolist()!r}")
    b = np.exp(np.mean(np.log(norms), axis=-1))
    return [W * (b / norms[..., j])[..., None, None] for j, W in enumerate(Ws)]


# --------------------------------------------------------------------- rank ratios


class RatioSummary(NamedTuple):
    """Per-layer ``r(W_j)`` and the two averages of Theorems 4–5.

    ``ratios``: shape ``(..., k)``; ``mean``: ``(1/k) Σ_j r(W_j)`` (Eq. 3 / Eq. 7);
    ``harmonic``: the harmonic mean of ``1/r(W_j) = ‖W_j‖_F/‖W_j‖_σ``, i.e. of the square
    roots of the stable ranks (Eq. 4 / Eq. 8); it equals ``1/mean``.
    """

    ratios: np.ndarray
    mean: np.ndarray
    harmonic: np.ndarray


def layer_ratios(params):
    """``r(W_j) = ‖W_j‖_σ/‖W_j‖_F`` (:func:`rank_ratio`) for each layer: shape ``(..., k)``.

    Batch axes allowed; NaN for a zero layer.
    """
    Ws, _ = _layer_norms(params)
    return np.stack(np.broadcast_arrays(*[rank_ratio(W) for W in Ws]), axis=-1)


def ratio_summary(params):
    """:class:`RatioSummary` of ``params = [W_1, ..., W_k]`` (batch axes allowed)."""
    r = layer_ratios(params)
    mean = np.mean(r, axis=-1)
    return RatioSummary(r, mean[()], (r.shape[-1] / np.sum(r, axis=-1))[()])


# ------------------------------------------------------------------ data, hypotheses


class TeacherData(NamedTuple):
    """Data realised by a shallow teacher; see :func:`teacher_data`."""

    X: np.ndarray
    Y: np.ndarray
    params: list
    B: float


def _sphere(rng, n, d):
    g = rng.standard_normal((n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def teacher_data(key: jax.Array, n, widths, theorem=4, gap=1e-2):
    """Data meeting Theorem 4's or 5's hypotheses, realised by a random balanced shallow teacher.

    The teacher has Gaussian weights (entries of ``W_l`` are ``N(0, 1/d_{l-1})``), is
    rebalanced (:func:`rebalance`) and then scaled, all layers alike, so that the
    hypotheses hold tightly. Inputs are uniform on the unit sphere (``‖x_i‖ = 1``).

    - ``theorem=4``: the teacher's last layer is made entrywise non-negative, so that
      ``N ≥ 0`` (for ``k = 1``, ``N(x) = w·x``, each ``x_i`` is flipped instead to make
      ``w·x_i ≥ 0``); ``Y = N(X)`` and ``max_i y_i = 1``.
    - ``theorem=5``: ``Y = sign N(X)`` and ``min_i y_i N(x_i) = 1``. Points with
      ``|N(x)| ≤ gap·Π_l ‖W_l‖_σ`` (before scaling) are redrawn, to keep ``B`` moderate.

    Both hold up to round-off (``~1e-16``), hence the ``atol`` of the ``check_*`` functions.
    A teacher that is identically zero (a dead layer) is redrawn. The draws come from a
    NumPy generator seeded with the bits of ``key`` (``jax.random`` would compile once
    per shape); the same key gives the same data.

    Arguments:
        key: a ``jax.random`` key.
        n: number of points.
        widths: ``(d_0, d_1, ..., d_k)`` with ``d_k = 1``.
        theorem: ``4`` (non-negative regression targets) or ``5`` (``±1`` labels).
        gap: in ``[0, 1)``; only used for ``theorem=5``.

    Returns:
        ``TeacherData(X, Y, params, B)``: ``X`` of shape ``(n, d_0)``, ``Y`` of shape
        ``(n, 1)``, the teacher ``params`` (every layer of norm ``B``) and
        ``B =`` :func:`shallow_B` ``(params)``, the ``B`` to pass to the bounds.
    """
    if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"n: expected a positive int, got {n!r}")
    widths = tuple(widths)
    if len(widths) < 2 or not all(isinstance(d, (int, np.integer)) and d >= 1 for d in widths) or widths[-1] != 1:
        raise ValueError(f"widths: expected (d_0, ..., d_k) of positive ints with d_k = 1, got {widths!r}")
    if theorem not in (4, 5):
        raise ValueError(f"theorem: expected 4 or 5, got {theorem!r}")
    if not 0 <= gap < 1:
        raise ValueError(f"gap: expected a float in [0, 1), got {gap!r}")
    k = len(widths) - 1
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key), dtype=np.uint32).ravel())
    for _ in range(100):
        Ws = [rng.standard_normal((fo, fi)) / np.sqrt(fi) for fi, fo in zip(widths[:-1], widths[1:])]
        if theorem == 4:
            X = _sphere(rng, n, widths[0])
            if k == 1:
                X = X * np.where(X @ Ws[0].T >= 0, 1.0, -1.0)
            else:
                Ws[-1] = np.abs(Ws[-1])
        else:
            X = _points_away_from_zero(rng, n, Ws, gap)
            if X is None:
                continue
        if any(np.linalg.norm(W) == 0 for W in Ws):
            continue
        Ws = rebalance(Ws)
        out = _net(Ws, X)[:, 0]
        scale = np.max(out) if theorem == 4 else np.min(np.abs(out))
        if not scale > 0:
            continue
        Ws = [W * scale ** (-1.0 / k) for W in Ws]
        Y = _net(Ws, X) if theorem == 4 else np.sign(out)[:, None]
        return TeacherData(X, Y, Ws, float(shallow_B(Ws)))
    raise RuntimeError(f"teacher_data: no usable teacher in 100 draws for widths {widths!r}")


def _points_away_from_zero(rng, n, Ws, gap, rounds=10):
    """``n`` unit points with ``|N(x)| > gap·Π_l ‖W_l‖_σ``, or ``None`` if too few turn up."""
    threshold = gap * np.prod([np.linalg.norm(W, 2) for W in Ws])
    kept, count = [], 0
    for _ in range(rounds):
        C = _sphere(rng, 4 * n + 16, Ws[0].shape[1])
        C = C[np.abs(_net(Ws, C)[:, 0]) > threshold]
        kept.append(C)
        count += len(C)
        if count >= n:
            return np.concatenate(kept)[:n]
    return None


def _check_data(X, Y, atol):
    if not (np.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol: expected a non-negative finite float, got {atol!r}")
    X = _as_matrix(X, "X")
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 2 and Y.shape[1] == 1:
        Y = Y[:, 0]
    if Y.shape != (X.shape[0],) or not np.all(np.isfinite(Y)):
        raise ValueError(
            f"Y: expected finite scalar labels of shape ({X.shape[0]},) or ({X.shape[0]}, 1), got {Y.shape}"
        )
    return X, Y


def _check_teacher(params, X):
    Ws = _check_scalar_net(params)
    if Ws[0].shape[1] != X.shape[1]:
        raise ValueError(f"params[0]: expected {X.shape[1]} columns (d_in of X), got shape {Ws[0].shape}")
    return _net(Ws, X)[:, 0]


def check_theorem4_assumptions(X, Y, params=None, atol=1e-12):
    """Check Theorem 4's hypotheses on data (and, if given, on the shallow net) and return a witness.

    Data: ``y_i ≥ 0`` for all ``i`` and some ``i`` with ``‖x_i‖ ≤ 1`` and ``y_i ≥ 1``.
    Net (if ``params`` is given): scalar output and ``N(x_i) = y_i`` for all ``i``, to
    ``atol·max(1, |y_i|)``. All inequalities are checked with slack ``atol``. The bound
    ``B`` is then :func:`shallow_B` ``(params)`` (after :func:`rebalance`) or
    ``max_j ‖W_j‖_F``.

    Arguments:
        X: inputs, shape ``(n, d_in)``.
        Y: targets, shape ``(n, 1)`` or ``(n,)``.
        params: optional ``[W_1, ..., W_k]``.
        atol: non-negative tolerance.

    Returns:
        The index ``i`` of a witness point (``‖x_i‖ ≤ 1``, ``y_i ≥ 1``), the largest ``y_i``.

    Raises:
        ValueError: naming the argument whose hypothesis fails.
    """
    X, Y = _check_data(X, Y, atol)
    if np.min(Y) < -atol:
        raise ValueError(f"Y: Theorem 4 expects targets y_i >= 0, got min_i y_i = {np.min(Y)}")
    inside = np.linalg.norm(X, axis=1) <= 1 + atol
    if not np.any(inside & (Y >= 1 - atol)):
        best = np.max(Y[inside]) if np.any(inside) else None
        raise ValueError(
            f"X, Y: Theorem 4 expects some i with ‖x_i‖ <= 1 and y_i >= 1; max y_i over ‖x_i‖ <= 1 is {best}"
        )
    if params is not None:
        err = np.abs(_check_teacher(params, X) - Y)
        if np.any(err > atol * np.maximum(1.0, np.abs(Y))):
            raise ValueError(
                f"params: Theorem 4 expects N(x_i) = y_i for all i, got max_i |N(x_i) − y_i| = {err.max()}"
            )
    return int(np.argmax(np.where(inside, Y, -np.inf)))


def check_theorem5_assumptions(X, Y, params=None, atol=1e-12):
    """Check Theorem 5's hypotheses on data (and, if given, on the shallow net) and return a witness.

    Data: ``y_i ∈ {−1, +1}`` exactly and some ``i`` with ``‖x_i‖ ≤ 1``. Net (if
    ``params`` is given): scalar output and margins ``y_i N(x_i) ≥ 1 − atol`` for all ``i``.

    Arguments:
        X: inputs, shape ``(n, d_in)``.
        Y: labels, shape ``(n, 1)`` or ``(n,)``.
        params: optional ``[W_1, ..., W_k]``.
        atol: non-negative tolerance.

    Returns:
        The index ``i`` of the point of smallest norm (a witness iff ``‖x_i‖ ≤ 1``).

    Raises:
        ValueError: naming the argument whose hypothesis fails.
    """
    X, Y = _check_data(X, Y, atol)
    if not np.all(np.abs(Y) == 1):
        raise ValueError(f"Y: Theorem 5 expects labels in {{-1, +1}}, got values {np.unique(Y)}")
    norms = np.linalg.norm(X, axis=1)
    if np.min(norms) > 1 + atol:
        raise ValueError(f"X: Theorem 5 expects some i with ‖x_i‖ <= 1, got min_i ‖x_i‖ = {np.min(norms)}")
    if params is not None:
        margins = Y * _check_teacher(params, X)
        if np.min(margins) < 1 - atol:
            raise ValueError(
                f"params: Theorem 5 expects y_i N(x_i) >= 1 for all i, got min_i y_i N(x_i) = {margins.min()}"
            )
    return int(np.argmin(norms))
