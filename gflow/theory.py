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
