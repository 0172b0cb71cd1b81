"""Independent reference integrators for bias-free ReLU networks.

This module is the yardstick that gflow's own engine is tested and benchmarked against,
so it shares no code with the rest of gflow: it imports only NumPy, SciPy and JAX.

- [`scipy_flow`][] integrates the exact gradient flow `dθ/dt = −∇L(θ)` with SciPy's
  `DOP853` and a hand-written NumPy forward/backward pass. Between kinks the activation
  pattern is held fixed, so the vector field is a polynomial; one terminal event per
  pre-activation stops the solver at every kink, where the pattern entry is flipped and
  the integration restarts.
- [`gradient_descent`][] and [`gradient_descent_batch`][] run full-batch gradient descent
  in JAX, jitted once per shape.
- [`loss_value`][], [`loss_gradient`][], [`preactivations`][],
  [`balance_invariants`][] and [`balance_drift`][] are small NumPy helpers.

Conventions (as in the rest of gflow):

- `params = [W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})` (out × in), and
  `N(x) = W_k σ(W_{k-1} ··· σ(W_1 x))` with `σ(z) = max(z, 0)` and `σ'(0) = 0`.
- `X` has shape `(n, d_in)`, one point per row. `Y` has shape `(n, d_out)` for the
  `"square"` and `"mse"` losses and shape `(n,)` (or `(n, 1)`) of ±1 labels for the
  `"exponential"` and `"logistic"` losses, which need `d_out = 1`.
- Losses: `"square"` `½ Σ_i ‖N(x_i) − y_i‖²`; `"mse"` the mean of the `n·d_out` squared
  errors; `"exponential"` `(1/n) Σ_i exp(−y_i N(x_i))`; `"logistic"`
  `(1/n) Σ_i log(1 + exp(−y_i N(x_i)))`; plus `(λ/2)‖θ‖²` for weight decay `λ`.
- A pre-activation is named by `(layer, neuron, point)`: `layer` is the 0-based index
  into `params` of the matrix that produces it (hidden layers only, `0..k-2`), `neuron`
  the row of that matrix, `point` the row of `X`. A crossing's `direction` is `+1` when
  the pre-activation becomes active (goes from `≤ 0` to `> 0`) and `−1` when it becomes
  inactive.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate
import scipy.special

jax.config.update("jax_enable_x64", True)

__all__ = [
    "LOSSES",
    "ReferenceResult",
    "balance_drift",
    "balance_invariants",
    "gradient_descent",
    "gradient_descent_batch",
    "loss_gradient",
    "loss_value",
    "preactivations",
    "scipy_flow",
]

LOSSES = ("square", "mse", "exponential", "logistic")
_MARGIN_LOSSES = ("exponential", "logistic")

# Offset that keeps an event function off zero when its pre-activation sits exactly at
# zero and does not move (a frozen neuron); far below any real pre-activation.
_TINY = np.finfo(np.float64).tiny

# Largest n·d_l·d_{l-1} for which a layer is computed by broadcast-and-sum in JAX
# rather than a matrix product (measured crossover on XLA:CPU: 2000-8000).
_SMALL_PRODUCT = 4096


# --------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------


def _check_params(params, name="params", batched=False):
    """Float64 copies of `params`; ValueError unless the shapes chain."""
    if isinstance(params, np.ndarray) or not isinstance(params, Sequence):
        raise ValueError(f"`{name}` must be a list of weight matrices [W_1, ..., W_k]; got {type(params).__name__}.")
    if len(params) == 0:
        raise ValueError(f"`{name}` must hold at least one weight matrix; got none.")
    ndim = 3 if batched else 2
    what = "(batch, d_l, d_{l-1})" if batched else "(d_l, d_{l-1})"
    out = []
    for i, W in enumerate(params):
        W = np.array(W, dtype=np.float64)
        if W.ndim != ndim:
            raise ValueError(f"`{name}[{i}]` must have shape {what}; got shape {W.shape}.")
        if not np.all(np.isfinite(W)):
            raise ValueError(f"`{name}[{i}]` must be finite; it holds nan or inf.")
        if i > 0 and W.shape[-1] != out[-1].shape[-2]:
            raise ValueError(
                f"`{name}[{i}]` must have {out[-1].shape[-2]} columns to follow "
                f"`{name}[{i - 1}]` of shape {out[-1].shape}; got shape {W.shape}."
            )
        if batched and out and W.shape[0] != out[0].shape[0]:
            raise ValueError(
                f"`{name}[{i}]` must have batch size {out[0].shape[0]} like `{name}[0]`; got shape {W.shape}."
            )
        out.append(W)
    return out


def _check_loss(loss):
    if loss not in LOSSES:
        raise ValueError(f"`loss` must be one of {LOSSES}; got {loss!r}.")


def _check_nonnegative(value, name):
    if not isinstance(value, numbers.Real) or not np.isfinite(value) or value < 0:
        raise ValueError(f"`{name}` must be a finite number >= 0; got {value!r}.")
    return float(value)


def _check_positive(value, name):
    if not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0; got {value!r}.")
    return float(value)


def _check_count(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0; got {value!r}.")
    return int(value)


def _check_data(X, Y, d_in, d_out, loss):
    """Float64 `X` of shape (n, d_in) and `Y` reshaped to (n, d_out)."""
    X = np.array(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != d_in or X.shape[0] == 0:
        raise ValueError(f"`X` must have shape (n, {d_in}) with n >= 1 to match params[0]; got shape {X.shape}.")
    n = X.shape[0]
    Y = np.array(Y, dtype=np.float64)
    if loss in _MARGIN_LOSSES:
        if d_out != 1:
            raise ValueError(
                f"`loss={loss!r}` needs a scalar output (d_out = 1); the last weight matrix gives d_out = {d_out}."
            )
        if Y.shape not in ((n,), (n, 1)):
            raise ValueError(
                f"`Y` must have shape ({n},) or ({n}, 1) of ±1 labels for loss={loss!r}; got shape {Y.shape}."
            )
    elif Y.shape != (n, d_out) and not (d_out == 1 and Y.shape == (n,)):
        raise ValueError(f"`Y` must have shape ({n}, {d_out}) for loss={loss!r}; got shape {Y.shape}.")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):
        raise ValueError("`X` and `Y` must be finite; they hold nan or inf.")
    return X, Y.reshape(n, d_out)


# --------------------------------------------------------------------------------------
# NumPy forward and backward passes with a given activation pattern
# --------------------------------------------------------------------------------------


def _forward(params, X, masks=None):
    """Pre-activations, layer inputs and output.

    With `masks=None` the pattern is the true one (`z > 0`); otherwise `masks[l]` (bool,
    shape `(n, d_l)`) says which entries of hidden layer `l` count as active.

    Returns `(Z, H, F, masks)`: `Z[l]` the pre-activations of hidden layer `l`, shape
    `(n, d_l)`; `H[l]` the input of `params[l]` (`H[0] = X`); `F` the output, shape
    `(n, d_out)`; the masks used.
    """
    H, Z, used = [X], [], []
    for i, W in enumerate(params[:-1]):
        z = H[-1] @ W.T
        m = z > 0 if masks is None else masks[i]
        Z.append(z)
        used.append(m)
        H.append(np.where(m, z, 0.0))
    return Z, H, H[-1] @ params[-1].T, used


def _loss_of_output(F, Y, loss):
    if loss == "square":
        return 0.5 * float(np.sum((F - Y) ** 2))
    if loss == "mse":
        return float(np.mean((F - Y) ** 2))
    q = Y[:, 0] * F[:, 0]
    if loss == "exponential":
        return float(np.mean(np.exp(-q)))
    return float(np.mean(np.logaddexp(0.0, -q)))


def _output_gradient(F, Y, loss):
    """∂L/∂F, shape (n, d_out)."""
    if loss == "square":
        return F - Y
    if loss == "mse":
        return 2.0 * (F - Y) / F.size
    n = F.shape[0]
    q = Y * F
    if loss == "exponential":
        return -Y * np.exp(-q) / n
    return -Y * scipy.special.expit(-q) / n


def _backward(params, H, masks, G, weight_decay):
    """Gradients of the loss w.r.t. each weight matrix, given ∂L/∂F = `G`."""
    grads = [None] * len(params)
    delta = G
    for i in reversed(range(len(params))):
        grads[i] = delta.T @ H[i]
        if weight_decay:
            grads[i] = grads[i] + weight_decay * params[i]
        if i > 0:
            delta = (delta @ params[i]) * masks[i - 1]
    return grads


def _preactivation_velocity(params, X, masks, velocity):
    """d/dt of every hidden pre-activation when θ moves with `velocity` (forward mode)."""
    h, dh, out = X, np.zeros_like(X), []
    for W, dW, m in zip(params[:-1], velocity[:-1], masks, strict=True):
        z = h @ W.T
        dz = dh @ W.T + h @ dW.T
        out.append(dz)
        h, dh = np.where(m, z, 0.0), np.where(m, dz, 0.0)
    return out


# --------------------------------------------------------------------------------------
# Public NumPy helpers
# --------------------------------------------------------------------------------------


def loss_value(params, X, Y, loss="square", weight_decay=0.0):
    """The training loss `L(θ) + (λ/2)‖θ‖²`, in NumPy float64.

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})`.
    - `X`: inputs, shape `(n, d_in)`.
    - `Y`: targets, shape `(n, d_out)`; `(n,)` labels for the margin losses.
    - `loss`: one of `"square"`, `"mse"`, `"exponential"`, `"logistic"`.
    - `weight_decay`: `λ >= 0`.

    **Returns:** the loss, a Python float.
    """
    _check_loss(loss)
    params = _check_params(params)
    X, Y = _check_data(X, Y, params[0].shape[1], params[-1].shape[0], loss)
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    F = _forward(params, X)[2]
    reg = 0.5 * weight_decay * sum(float(np.sum(W**2)) for W in params)
    return _loss_of_output(F, Y, loss) + reg


def loss_gradient(params, X, Y, loss="square", weight_decay=0.0):
    """`∇L(θ) + λθ` by a hand-written NumPy backward pass, with `σ'(0) = 0`.

    Arguments as for [`loss_value`][].

    **Returns:** a list of arrays shaped like `params`.
    """
    _check_loss(loss)
    params = _check_params(params)
    X, Y = _check_data(X, Y, params[0].shape[1], params[-1].shape[0], loss)
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    _, H, F, masks = _forward(params, X)
    return _backward(params, H, masks, _output_gradient(F, Y, loss), weight_decay)


def preactivations(params, X):
    """The hidden pre-activations `p_{l,j,i} = (W_l h_{l-1}(x_i))_j`.

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})`.
    - `X`: inputs, shape `(n, d_in)`.

    **Returns:** a list with one array per hidden layer `l = 0..k-2`, of shape
    `(d_l, n)`, so that `preactivations(params, X)[layer][neuron, point]` is the
    pre-activation named by `(layer, neuron, point)`.
    """
    params = _check_params(params)
    X = np.array(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != params[0].shape[1]:
        raise ValueError(f"`X` must have shape (n, {params[0].shape[1]}) to match params[0]; got shape {X.shape}.")
    return [z.T for z in _forward(params, X)[0]]


def balance_invariants(params):
    """`‖W_l[j,:]‖² − ‖W_{l+1}[:,j]‖²` for every hidden neuron `j` of every hidden layer.

    These are constant along gradient flow (SPEC §3) and decay like `e^{−2λt}` under
    weight decay `λ`; their drift measures how exact a trajectory is.

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})`.

    **Returns:** a float64 array of length `d_1 + ... + d_{k-1}`, ordered by layer and
    then neuron (empty for `k = 1`).
    """
    params = _check_params(params)
    parts = [
        np.sum(W**2, axis=1) - np.sum(W_next**2, axis=0) for W, W_next in zip(params[:-1], params[1:], strict=True)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)


def balance_drift(params0, params, *, weight_decay=0.0, t=0.0, scale=None):
    """How far `params` broke the SPEC §3 invariants of `params0`: the largest
    `|q(params) − q(params0)·e^{−2λt}| / scale` over hidden neurons, with `q` from
    [`balance_invariants`][] (`λ = weight_decay`, `t` the flow time between the two).

    **Arguments:**

    - `params0`, `params`: `[W_1, ..., W_k]` at the start and at time `t`.
    - `weight_decay`, `t`: the decay of the invariants under weight decay (0: conserved).
    - `scale`: a float, or one per neuron; default each neuron's
      `‖W_l[j,:]‖² + ‖W_{l+1}[:,j]‖²` in `params0`, so the drift is relative.

    **Returns:** a float (0 for a network without hidden layers).
    """
    q0, q = balance_invariants(params0), balance_invariants(params)
    if scale is None:
        p0 = _check_params(params0)
        scale = np.concatenate([np.zeros(0)] + [
            np.sum(W**2, axis=1) + np.sum(W_next**2, axis=0) for W, W_next in zip(p0[:-1], p0[1:])
        ])  # fmt: skip
    return float(np.max(np.abs(q - q0 * np.exp(-2.0 * weight_decay * t)) / scale, initial=0.0))


# --------------------------------------------------------------------------------------
# Exact gradient flow with SciPy
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReferenceResult:
    """What [`scipy_flow`][] returns.

    **Fields:**

    - `params`: the weights `[W_1, ..., W_k]` at time `t`.
    - `t`: the time reached: `t1`, or the time a sliding mode began.
    - `crossings`: one `(t, layer, neuron, point, direction)` per kink crossed, in time
      order; `direction` is `+1` for becoming active, `−1` for becoming inactive.
    - `slid`: `True` when the flow reached a switching surface that both one-sided
      fields push into (a sliding mode); the integration stops there.
    - `nfev`: the number of vector-field evaluations SciPy made.
    """

    params: list
    t: float
    crossings: list
    slid: bool
    nfev: int


class _Layout:
    """Flat vectors ↔ weight matrices, and flat pattern index ↔ (layer, neuron, point)."""

    def __init__(self, shapes, n):
        self.shapes = shapes
        self.n = n
        sizes = [a * b for a, b in shapes]
        self.param_offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.hidden = [a for a, _ in shapes[:-1]]
        self.entry_offsets = np.concatenate([[0], np.cumsum([d * n for d in self.hidden])])

    def unflatten(self, theta):
        o = self.param_offsets
        return [theta[o[i] : o[i + 1]].reshape(s) for i, s in enumerate(self.shapes)]

    def masks(self, pattern):
        """Flat pattern → list of bool masks of shape (n, d_l)."""
        o = self.entry_offsets
        return [pattern[o[i] : o[i + 1]].reshape(d, self.n).T for i, d in enumerate(self.hidden)]

    def entry(self, index):
        layer = int(np.searchsorted(self.entry_offsets, index, side="right") - 1)
        neuron, point = divmod(int(index - self.entry_offsets[layer]), self.n)
        return layer, neuron, point


def _flat_entries(arrays):
    """List of per-layer (n, d_l) arrays → flat vector in (layer, neuron, point) order."""
    if not arrays:
        return np.zeros(0)
    return np.concatenate([a.T.ravel() for a in arrays])


def scipy_flow(
    params,
    X,
    Y,
    *,
    loss="square",
    t1,
    weight_decay=0.0,
    rtol=1e-12,
    atol=1e-14,
    max_events=10_000,
):
    """Integrate the gradient flow `dθ/dt = −∇L(θ)` exactly, kink by kink, with SciPy.

    Between kinks the activation pattern (one bool per pre-activation) is held fixed, so
    the vector field is a polynomial and `solve_ivp(method="DOP853")` is accurate to its
    tolerances. One terminal event per pre-activation, whose value is the
    pre-activation, stops the solver at each kink. There the one-sided fields decide:

    - the new side's field carries `p` into the new side: a crossing; the pattern entry
      is flipped, the crossing recorded, and the integration restarts;
    - the new side's field pushes `p` back while the old side's pushes it into the
      surface: a sliding mode; this reference does not integrate it, and stops with
      `slid=True`;
    - otherwise (both push `p` back to the old side, a grazing touch, or `p` is
      stationary on the surface) nothing changes.

    When several pre-activations reach zero at the same instant, each is decided in
    turn. The initial pattern is `p > 0`. A first-layer neuron that is inactive on every
    point gets no gradient from the loss (only from weight decay, which scales it), so
    its pre-activations never change sign again; their events are not watched.

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})`; not modified.
    - `X`: inputs, shape `(n, d_in)`.
    - `Y`: targets, shape `(n, d_out)`; `(n,)` labels for the margin losses.
    - `loss`: one of `"square"`, `"mse"`, `"exponential"`, `"logistic"`.
    - `t1`: the final time, `>= 0`, in units of the flow's own time.
    - `weight_decay`: `λ >= 0`; the flow is that of `L + (λ/2)‖θ‖²`.
    - `rtol`, `atol`: tolerances passed to `solve_ivp`.
    - `max_events`: the most kinks to handle before giving up with `RuntimeError`.

    **Returns:** a [`ReferenceResult`][].

    **Raises:** `ValueError` on malformed input; `RuntimeError` if SciPy fails or more
    than `max_events` kinks are met.
    """
    _check_loss(loss)
    params = _check_params(params)
    d_in, d_out = params[0].shape[1], params[-1].shape[0]
    X, Y = _check_data(X, Y, d_in, d_out, loss)
    t1 = _check_nonnegative(t1, "t1")
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    rtol = _check_positive(rtol, "rtol")
    atol = _check_positive(atol, "atol")
    max_events = _check_count(max_events, "max_events")

    layout = _Layout([W.shape for W in params], X.shape[0])
    n_entries = int(layout.entry_offsets[-1])

    def field(theta, masks):
        ps = layout.unflatten(theta)
        _, H, F, _ = _forward(ps, X, masks)
        grads = _backward(ps, H, masks, _output_gradient(F, Y, loss), weight_decay)
        return -np.concatenate([g.ravel() for g in grads])

    def preacts(theta):
        return _flat_entries(_forward(layout.unflatten(theta), X)[0])

    def preact_velocity(theta, pattern):
        masks = layout.masks(pattern)
        velocity = layout.unflatten(field(theta, masks))
        return _flat_entries(_preactivation_velocity(layout.unflatten(theta), X, masks, velocity))

    theta = np.concatenate([W.ravel() for W in params])
    pattern = preacts(theta) > 0
    t = 0.0
    crossings = []
    nfev = 0
    n_events = 0
    slid = False

    def decide(theta, pattern, index):
        """Classify the kink of entry `index`: "cross", "slide" or "graze"."""
        flipped = pattern.copy()
        flipped[index] = ~pattern[index]
        old_side = 1.0 if pattern[index] else -1.0
        f_old = preact_velocity(theta, pattern)[index]
        f_new = preact_velocity(theta, flipped)[index]
        # A rate within round-off of zero is zero: e.g. a unit that, once inactive,
        # disconnects its point entirely has f_new = 0 exactly, computed as ±1e-17.
        if abs(f_new) <= 1e-10 * (abs(f_old) + abs(f_new)):
            f_new = 0.0
        if old_side * f_new < 0 or (f_new == 0 and old_side * f_old < 0):
            return "cross", flipped
        if old_side * f_new > 0 and old_side * f_old < 0:
            return "slide", pattern
        return "graze", pattern

    while t < t1:
        masks = layout.masks(pattern)
        cache = {"t": None, "y": None, "p": None}

        def preacts_cached(s, y, cache=cache):
            if cache["t"] != s or not np.array_equal(cache["y"], y):
                cache["t"], cache["y"], cache["p"] = s, y.copy(), preacts(y)
            return cache["p"]

        def make_event(index, side):
            def event(s, y):
                return preacts_cached(s, y)[index] + side * _TINY

            event.terminal = True
            event.direction = -side
            return event

        # Skip first-layer neurons inactive on every point: their signs are fixed.
        dead = np.zeros(n_entries, dtype=bool)
        if layout.hidden:
            first = pattern[: layout.entry_offsets[1]].reshape(layout.hidden[0], -1)
            dead[: layout.entry_offsets[1]] = np.repeat(~first.any(axis=1), layout.n)
        watched = np.flatnonzero(~dead)
        events = [make_event(i, 1.0 if pattern[i] else -1.0) for i in watched]
        sol = scipy.integrate.solve_ivp(
            lambda s, y, masks=masks: field(y, masks),
            (t, t1),
            theta,
            method="DOP853",
            rtol=rtol,
            atol=atol,
            events=events or None,
        )
        nfev += int(sol.nfev)
        if sol.status == -1:
            raise RuntimeError(f"scipy_flow: solve_ivp failed at t={t}: {sol.message}")
        if sol.status == 0:
            theta, t = sol.y[:, -1], float(sol.t[-1])
            break

        # Terminal event: take the earliest root, whatever order SciPy lists them in.
        fired = [(te[0], k) for k, te in enumerate(sol.t_events) if len(te)]
        t_event, k = min(fired)
        theta, t = np.array(sol.y_events[k][0]), float(t_event)
        pending = [int(watched[k])]
        while pending:
            index = pending.pop(0)
            n_events += 1
            if n_events > max_events:
                raise RuntimeError(f"scipy_flow: more than max_events={max_events} kinks before t={t} (t1={t1}).")
            verdict, pattern = decide(theta, pattern, index)
            if verdict == "slide":
                slid = True
                break
            if verdict == "cross":
                direction = 1 if pattern[index] else -1
                crossings.append((t, *layout.entry(index), direction))
            if not pending:
                # Pre-activations that reached zero in the same instant: on the far side
                # of their surface or on it to round-off, and moving away from their
                # pattern. (SciPy reports only the earliest terminal event: a unit whose
                # point is cut in the layer below can fire first, with zero rates, while
                # the unit below that reopens the point sits at p ≈ −1e-16.)
                side = np.where(pattern, 1.0, -1.0)
                p = preacts(theta)
                velocity = preact_velocity(theta, pattern)
                moving = np.abs(velocity) > 1e-10 * np.max(np.abs(velocity), initial=0.0)
                at = side * p <= 1e-13 * np.max(np.abs(p), initial=1.0)
                late = at & (side * velocity < 0) & moving
                pending = [int(i) for i in np.flatnonzero(late)]
        if slid:
            break

    final = [np.array(W) for W in layout.unflatten(theta)]
    return ReferenceResult(final, t, crossings, slid, nfev)


# --------------------------------------------------------------------------------------
# Gradient descent in JAX
# --------------------------------------------------------------------------------------


def _relu(z):
    # Not jnp.maximum: its derivative at 0 is 1/2, the paper's convention is σ'(0) = 0.
    return jnp.where(z > 0, z, 0.0)


def _apply(h, W, small):
    """`h` of shape `(n, a, *batch)` through `W` of shape `(b, a, *batch)`: `(n, b, *batch)`.

    Small products are written as a broadcast multiply and a sum, which XLA fuses into
    one loop: on CPU that is several times faster than a tiny `dot` (a 2-2-2 network
    steps in ~25 ns instead of ~200 ns). Large ones use a matrix product (unbatched
    only).
    """
    if small:
        return jnp.sum(h[:, None] * W[None], axis=2)
    return h @ W.T


def _jax_loss(params, X, Y, weight_decay, loss, small):
    """Loss of one network, or the sum of the losses of a batch held on trailing axes."""
    h = X
    for W, s in zip(params[:-1], small[:-1], strict=True):
        h = _relu(_apply(h, W, s))
    F = _apply(h, params[-1], small[-1])
    if loss == "square":
        value = 0.5 * jnp.sum((F - Y) ** 2)
    elif loss == "mse":
        value = jnp.sum(jnp.mean((F - Y) ** 2, axis=(0, 1)))
    else:
        q = Y[:, 0] * F[:, 0]
        if loss == "exponential":
            value = jnp.sum(jnp.mean(jnp.exp(-q), axis=0))
        else:
            value = jnp.sum(jnp.mean(jnp.logaddexp(0.0, -q), axis=0))
    return value + 0.5 * weight_decay * sum(jnp.sum(W**2) for W in params)


def _descend(params, X, Y, lr, steps, weight_decay, loss, small):
    grad = jax.grad(_jax_loss)

    def step(_, p):
        g = grad(p, X, Y, weight_decay, loss, small)
        return [W - lr * gW for W, gW in zip(p, g, strict=True)]

    # No unrolling: measured on XLA:CPU, unroll factors 2-16 made each step slower.
    return jax.lax.fori_loop(0, steps, step, params)


@functools.cache
def _compiled_descent(loss, small, vmapped, data_batched):
    """The jitted descent loop; `jax.jit` then compiles once per shape and dtype."""
    fn = functools.partial(_descend, loss=loss, small=small)
    if vmapped:
        data_axis = 0 if data_batched else None
        fn = jax.vmap(fn, in_axes=(0, data_axis, data_axis, None, None, None))
    return jax.jit(fn)


def _small_layers(shapes, n):
    return tuple(n * a * b <= _SMALL_PRODUCT for a, b in shapes)


def gradient_descent(params, X, Y, *, lr, steps, loss="square", weight_decay=0.0):
    """Full-batch gradient descent `θ ← θ − lr·(∇L(θ) + λθ)`, in JAX float64.

    The loop is jitted once per (shapes, `loss`); `lr`, `steps` and `weight_decay`
    are traced, so changing them does not recompile. `σ'(0) = 0`, as in the paper.
    `steps` steps of size `lr` approximate the gradient flow at time `lr·steps` with
    an error of order `lr`.

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})`.
    - `X`: inputs, shape `(n, d_in)`.
    - `Y`: targets, shape `(n, d_out)`; `(n,)` labels for the margin losses.
    - `lr`: the step size, `> 0`.
    - `steps`: the number of steps, an integer `>= 0`.
    - `loss`: one of `"square"`, `"mse"`, `"exponential"`, `"logistic"`.
    - `weight_decay`: `λ >= 0`.

    **Returns:** the final weights, a list of NumPy arrays shaped like `params`.
    """
    _check_loss(loss)
    params = _check_params(params)
    X, Y = _check_data(X, Y, params[0].shape[1], params[-1].shape[0], loss)
    lr = _check_positive(lr, "lr")
    steps = _check_count(steps, "steps")
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    small = _small_layers([W.shape for W in params], X.shape[0])
    out = _compiled_descent(loss, small, False, False)(
        [jnp.asarray(W) for W in params],
        jnp.asarray(X),
        jnp.asarray(Y),
        lr,
        steps,
        weight_decay,
    )
    return [np.asarray(W) for W in out]


def gradient_descent_batch(params, X, Y, *, lr, steps, loss="square", weight_decay=0.0):
    """[`gradient_descent`][] for a batch of networks of one shape at once.

    Small networks are stepped together with the batch on the last axis, where XLA
    vectorises over it (288 networks 2-2-2 take ~1.5 µs a step on one CPU core); larger
    ones through `jax.vmap`.

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(batch, d_l, d_{l-1})`.
    - `X`, `Y`: shared data as for [`gradient_descent`][], or one data set per network
      with a leading batch axis: `X` of shape `(batch, n, d_in)` and `Y` of shape
      `(batch, n, d_out)` (`(batch, n)` for the margin losses).
    - `lr`, `steps`, `loss`, `weight_decay`: as for [`gradient_descent`][], shared.

    **Returns:** the final weights, a list of NumPy arrays of shape
    `(batch, d_l, d_{l-1})`.
    """
    _check_loss(loss)
    params = _check_params(params, batched=True)
    batch = params[0].shape[0]
    d_in, d_out = params[0].shape[2], params[-1].shape[1]
    X = np.asarray(X, dtype=np.float64)
    data_batched = X.ndim == 3
    if data_batched:
        Y = np.asarray(Y, dtype=np.float64)
        if X.shape[0] != batch or Y.ndim == 0 or Y.shape[0] != batch:
            raise ValueError(
                f"batched `X` and `Y` must have leading axis {batch} like `params`; got shapes {X.shape} and {Y.shape}."
            )
        checked = [_check_data(x, y, d_in, d_out, loss) for x, y in zip(X, Y, strict=True)]
        X = np.stack([x for x, _ in checked])
        Y = np.stack([y for _, y in checked])
    else:
        X, Y = _check_data(X, Y, d_in, d_out, loss)
    lr = _check_positive(lr, "lr")
    steps = _check_count(steps, "steps")
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    n = X.shape[-2]
    small = _small_layers([W.shape[1:] for W in params], n)
    if all(small):
        # Batch on the last axis; shared data broadcast along it.
        if data_batched:
            X, Y = np.moveaxis(X, 0, -1), np.moveaxis(Y, 0, -1)
        else:
            X, Y = X[..., None], Y[..., None]
        out = _compiled_descent(loss, small, False, False)(
            [jnp.asarray(np.moveaxis(W, 0, -1)) for W in params],
            jnp.asarray(X),
            jnp.asarray(Y),
            lr,
            steps,
            weight_decay,
        )
        return [np.moveaxis(np.asarray(W), -1, 0) for W in out]
    out = _compiled_descent(loss, small, True, data_batched)(
        [jnp.asarray(W) for W in params],
        jnp.asarray(X),
        jnp.asarray(Y),
        lr,
        steps,
        weight_decay,
    )
    return [np.asarray(W) for W in out]
