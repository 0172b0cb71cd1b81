"""Independent reference integrators for bias-free ReLU networks.

This module is the yardstick that gflow's own engine is tested and benchmarked against,
so it shares no code with the rest of gflow: it imports only NumPy, SciPy and JAX.

- [`scipy_flow`][] integrates the exact gradient flow `dθ/dt = −∇L(θ)` with SciPy's
  `DOP853` and a hand-written NumPy forward/backward pass. Between kinks the activation
  pattern is held fixed, so the vector field is a polynomial; one terminal event per
  pre-activation stops the solver at every kink, where the pattern entry is flipped and
  the integration restarts. It stops where a unit would slide.
- [`filippov_flow`][] integrates the same flow through sliding modes, for any depth:
  where units sit on their kinks the velocity is minus the minimum-norm element of the
  convex hull of the one-sided gradients (a Minkowski sum of one hull per data point),
  found by Wolfe's algorithm in NumPy, and
  the energy `∫‖θ̇‖²` is integrated alongside so that `L(0) − L(t) = ∫‖θ̇‖²` can be
  checked.
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

**The Filippov flow.** How [`filippov_flow`][] integrates through the points where units
sit on their kinks, in three parts: the field, the tests that decide which units slide
and which leave to which side, and the events.

*The field.* Let `K` be the set of pre-activations that sit on their surfaces `p_j = 0`,
and every other one active or inactive by its sign (the *pattern*). Write `g(c)`,
`c ∈ [0,1]^K`, for the loss gradient computed by backpropagation with the ReLU slope of
unit `j ∈ K` set to `c_j` (`σ(0) = 0` in the forward pass, so the outputs do not depend
on `c`). A gradient of layer `l` is `δ_l^T h_{l−1}` with `δ_{l−1} = (δ_l W_l) ⊙ c_{l−1}`:
every product in it holds at most one slope of each unit, so `g` is multi-affine in `c`,
and

    D(θ) = conv{ g(c) : c ∈ [0,1]^K } = conv{ g(v) : v ∈ {0,1}^K }

is a conservative field of the loss (Bolte–Pauwels 2021: backpropagation with
slopes in `[0,1]` at the kinks). Along any absolutely continuous curve,
`dL/dt = ⟨d, θ̇⟩` for every `d ∈ D(θ)` and almost every `t`; a solution of the
differential inclusion `θ̇ ∈ −D(θ)`, `θ̇ = −u`, thus has `⟨d, u⟩ = ‖u‖²` for all
`d ∈ D(θ)` (take `d = u`), hence `‖d‖ ≥ ‖u‖`: `u` is the **minimum-norm element of
D(θ)**, and

    θ̇ = −u,    u = argmin{ ‖d‖ : d ∈ conv{ g(v) : v ∈ {0,1}^K } },
    L(θ(0)) − L(θ(t)) = ∫₀ᵗ ‖θ̇(s)‖² ds.

The hull is never listed vertex by vertex. The loss is a sum over the data points,
`σ(0) = 0` makes every point's output independent of `c`, and a unit's slope enters only
the backward pass of its own point, so `g(c) = g_rest + Σ_i g_i(c_{K_i})`, `K_i` the
units of `K` at point `i` and `g_rest` the gradient of the points without any (weight
decay included). The vertex set is then a product and its hull a Minkowski sum,

    D(θ) = g_rest + Σ_i conv{ g_i(v) : v ∈ {0,1}^{K_i} },

which costs `Σ_i 2^|K_i|` one-point backward passes instead of `2^|K|` full ones (13
units on their surfaces at 13 points: 26 one-point passes, not 8,192 full ones). `u` is
computed at every field evaluation by Wolfe's algorithm in its linear-oracle form
([`_min_norm_sum`][]: the vertex of the sum that minimises `⟨q, x⟩` is the sum of each
block's minimiser; weights `λ_{i,v}` per point, equivalent slopes `c_{K_i} = Σ_v λ_{i,v}
v`). With `K = ∅` it is the plain gradient. The energy integral is one more ODE state,
`Ė = ‖u‖²`, so the identity above is a check of the whole run.

*Sliding and leaving.* For a unit `j ∈ K` at point `x_i` the rate `ṗ_j(−d)` of `p_j`
under a field `−d` is the forward-mode derivative of `p_j` along `−d`. In depth 2,
`g(c) = g_0 + Σ_j c_j δ_j ∇p_j` (`δ_j` the backpropagated signal at `j`), so `‖g(c)‖²` is
a convex quadratic `q(c)` with `½ ∂q/∂c_j = −δ_j ṗ_j(−g(c))`: at an interior minimiser
every sliding rate is zero, and the field is tangent to the surfaces. Unit `j`'s
*one-sided tests* are

    s_j^± = ṗ_j(−u_j^±),   u_j^± = min-norm point of conv{ g(v) : v_j = 1 (+), 0 (−) },

its rate under the flow's field when its own slope is pinned to 1 (active side) or
0 (inactive side) and the other units of `K` still slide. With `φ_j(s) = min q(s, ·)`
over the other slopes (convex, `φ_j'(s) = −2δ_j ṗ_j`), the minimiser of `q` has
`c_j < 1` iff `φ_j'(1) > 0`, i.e. iff `s_j^+ < 0` when `δ_j > 0` — the sliding
condition `s_j^+ < 0 < s_j^−` (both sides push into the surface) is exactly the
condition that unit `j`'s min-norm slope is interior. In deeper nets `g` is
multi-affine rather than affine (a unit's rate then depends on the slopes of the
sliding units below it at the same point, taken as the equivalent slopes of the
min-norm weights); the same tests are used, as a rule rather than a theorem, and the
energy identity and `drift` tell whether the result was a solution. A unit decides:

- `s^− > 0 > s^+`: slides (in `K`);
- `s^+ > 0` and `s^− ≥ 0` (or `s^+ = 0 < s^−`): goes to (or crosses into) the active side;
- `s^− < 0` and `s^+ ≤ 0` (or `s^− = 0 > s^+`): goes to the inactive side;
- otherwise (repelling `s^+ > 0 > s^−`, or both zero: a unit cut off from the
  data by the layer below): keeps its side.

So a unit parked on its surface with zero rate on its side (it crossed into a side
where nothing moves it) leaves at the first event after which the other side's
field pushes it off, rather than when round-off lets its `p` change sign.

A rate counts as zero within `1e-10` of the largest rate in play.

*Events.* Between events `K` and the pattern are fixed and `DOP853` integrates `(θ, E)` at
`rtol`/`atol`. Sliding units are not projected: their `p_j` stay at 0 because the field is
tangent, to the tolerances (`drift` reports how well). The min-norm field has a kink where
a slope reaches 0 or 1 (a leaving time), which the step-size control resolves like any
loss of smoothness; the solver stops there anyway. Terminal events:

- `p_j` of a unit outside `K` reaches its surface from its side (as in
  [`scipy_flow`][]);
- `s_j^+` of a sliding unit rises through 0 (it leaves to the active side: its
  min-norm slope reaches 1), or `s_j^−` falls through 0 (it leaves to the inactive
  side: slope 0).

A unit's event fires once its `p` is past its surface by the smallest float, or, if the
segment starts with it within round-off of its surface (`16·ε·max(1, max|p|)`), by that
round-off, or by twice as far as it started past it: a unit held at `p ≈ 0` by round-off
would otherwise fire again and again at one instant (a depth-3 net on the logistic loss
in `tests/test_reference_deep.py`: 10,000 events at `t = 1.2466`).

SciPy's `solve_ivp` looks for sign changes of the event functions at the ends of its
steps only, so a unit whose `p` crosses its surface and comes back within one step is
missed. The segments are therefore integrated by a loop over `DOP853` steps that applies
SciPy's rule (a sign change in the event's direction, its root by `brentq` on the dense
output) to the watched pre-activations at `_SAMPLES` evenly spaced points of each step,
and to the sliding units' tests, each a min-norm solve, at the step's ends. The 20-point
Scale problem of `benchmarks/deep_scale` meets such an excursion: unit `(8, 2, 13)` rises
through its surface at `t = 0.45541`, peaks at `p = 8e-6` and comes back at about
`0.4577`, inside one step of `solve_ivp`, which went on with the unit inactive at
`p > 0`. An excursion shorter than an eighth of a step can still be missed. Right after a
crossing the unit's own excursion can be shorter still (depth 4, teacher seed 149 of
`benchmarks/filippov`: a unit crossed to its active side at `t = 0.6516`, its `p` rose to
8e-9 and fell back through 0 at `0.6524`), so after a crossing the integration starts with
a step of `_FIRST_STEP·max(1, t)`, from which DOP853 grows its steps by at most 10× each.
(Starting every integration so, after sliding events too, made two of
`benchmarks/filippov`'s problems chatter: more than 10,000 events.)

At an event, the unit whose test fired goes to its side, and with it its twins: the
units of `K` of the same neuron whose input at their point is a lasting positive multiple
of its own (`_lasting_multiples`: not two live inputs or more that are multiples by
chance at an instant), whose pre-activations are therefore a positive multiple of its own
and share its surface (a bias-free net meets this where, say, one unit is the only live
input to a layer at two points; depth 3, teacher seed 53 of `benchmarks/filippov` at
`t = 0.2937677`, where deciding the twin by its own tests sent it to the other side: the
tests pin twins to one side together). Every other unit of
`K`, the unit that arrived, and every unit within round-off (`16·ε·max(1, max|p|)`)
of its surface or past it becomes a candidate for `K`, except a unit cut off from
the data: every input to it at its point is inactive, a candidate, or a sliding unit
that leaves at this event (still on its surface, to the drift of its sliding), so its
`p` is 0 now and moves only as those inputs move, which its own event will tell; it
keeps its side. (Deciding such a unit by its tests made its side depend on the sign of
that drift: depth 3, teacher seed 304 of `benchmarks/filippov` at `t = 0.6295`, with a
leaving input at `p = ±3e-13` depending on the run's save times.) The candidates are
decided by the tests above computed with all of them in `K`; the units that do not
slide are removed (those that keep their side at once, then the one whose test is
the clearest, one at a time, the tests recomputed after each) until every remaining
candidate slides. A unit that arrives at its surface therefore crosses when its new
side's field carries it on and slides otherwise, as in [`scipy_flow`][]. Events are
recorded by comparing `K` and the pattern before and after.

A first-layer neuron inactive on every point is frozen (it gets no gradient from the
loss); its pre-activations are not watched.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import numbers
import pathlib
import typing
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.special

from ._io import write_json

jax.config.update("jax_enable_x64", True)

__all__ = [
    "LOSSES",
    "FilippovEvent",
    "FilippovResult",
    "ReferenceResult",
    "balance_drift",
    "balance_invariants",
    "gradient_descent",
    "gradient_descent_batch",
    "loss_gradient",
    "loss_value",
    "filippov_flow",
    "preactivations",
    "scipy_flow",
]

LOSSES = ("square", "mse", "exponential", "logistic")
_MARGIN_LOSSES = ("exponential", "logistic")

# Offset that keeps an event function off zero when its pre-activation sits exactly at
# zero and does not move (a frozen neuron); far below any real pre-activation.
_TINY = np.finfo(np.float64).tiny
_MAX_PER_POINT = 16  # units on their surfaces at one point: 2^16 slope patterns there

# First step after a crossing, relative to max(1, t) (module docstring, "Events").
_FIRST_STEP = 1e-6
# Points of each step at which the watched pre-activations are checked (module docstring,
# "Events").
_SAMPLES = 8
_EPS = np.finfo(np.float64).eps

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


def _check_flow_args(params, X, Y, loss, t1, weight_decay, rtol, atol, max_events):
    """The arguments the event-driven flows share, checked (each error names its argument)."""
    _check_loss(loss)
    params = _check_params(params)
    d_in, d_out = params[0].shape[1], params[-1].shape[0]
    X, Y = _check_data(X, Y, d_in, d_out, loss)
    t1 = _check_nonnegative(t1, "t1")
    weight_decay = _check_nonnegative(weight_decay, "weight_decay")
    rtol = _check_positive(rtol, "rtol")
    atol = _check_positive(atol, "atol")
    return params, X, Y, t1, weight_decay, rtol, atol, _check_count(max_events, "max_events")


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


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What an event-driven reference flow integrates: the shapes, the data and the loss."""

    layout: _Layout
    X: np.ndarray
    Y: np.ndarray
    loss: str
    weight_decay: float

    @classmethod
    def of(cls, params, X, Y, loss, weight_decay):
        return cls(_Layout([W.shape for W in params], X.shape[0]), X, Y, loss, weight_decay)

    @property
    def n_entries(self):
        return int(self.layout.entry_offsets[-1])

    def preacts(self, theta):
        """Every hidden pre-activation at the flat weights `theta`, flat (layer, neuron, point)."""
        return _flat_entries(_forward(self.layout.unflatten(theta), self.X)[0])

    def loss_of(self, ps):
        """`L(θ)` at the weight matrices `ps`, weight decay included."""
        reg = 0.5 * self.weight_decay * sum(float(np.sum(W**2)) for W in ps)
        return _loss_of_output(_forward(ps, self.X)[2], self.Y, self.loss) + reg

    def frozen(self, pattern, K=()):
        """Entries of first-layer neurons inactive on every point and none of them in `K`:
        they get no gradient from the loss, so their signs never change (not watched)."""
        o, dead = self.layout.entry_offsets, np.zeros(self.n_entries, dtype=bool)
        if self.layout.hidden:
            live = pattern.copy()
            live[np.asarray(K, dtype=int)] = True
            first = live[: o[1]].reshape(self.layout.hidden[0], self.layout.n)
            dead[: o[1]] = np.repeat(~first.any(axis=1), self.layout.n)
        return dead

    def field(self, theta, masks):
        """`−∇L` at the flat weights `theta` with the hidden units' slopes `masks`, flat."""
        ps = self.layout.unflatten(theta)
        _, H, F, _ = _forward(ps, self.X, masks)
        grads = _backward(ps, H, masks, _output_gradient(F, self.Y, self.loss), self.weight_decay)
        return -np.concatenate([g.ravel() for g in grads])

    def pattern_rates(self, theta, pattern):
        """`ṗ` of every entry under the field of the activation pattern `pattern`, flat."""
        masks = self.layout.masks(pattern)
        velocity = self.layout.unflatten(self.field(theta, masks))
        return _flat_entries(_preactivation_velocity(self.layout.unflatten(theta), self.X, masks, velocity))


def _decide_kink(prob, theta, pattern, index):
    """[`scipy_flow`][]'s verdict on entry `index` at its surface: `("cross", flipped
    pattern)`, `("slide", pattern)` or `("graze", pattern)`."""
    flipped = pattern.copy()
    flipped[index] = ~pattern[index]
    old_side = 1.0 if pattern[index] else -1.0
    f_old = prob.pattern_rates(theta, pattern)[index]
    f_new = prob.pattern_rates(theta, flipped)[index]
    # A rate within round-off of zero is zero: e.g. a unit that, once inactive,
    # disconnects its point entirely has f_new = 0 exactly, computed as ±1e-17.
    if abs(f_new) <= 1e-10 * (abs(f_old) + abs(f_new)):
        f_new = 0.0
    if old_side * f_new < 0 or (f_new == 0 and old_side * f_old < 0):
        return "cross", flipped
    if old_side * f_new > 0 and old_side * f_old < 0:
        return "slide", pattern
    return "graze", pattern


def _same_instant(prob, theta, pattern):
    """Entries that reached their surfaces at the instant of the last event: on the far
    side of it or on it to round-off, and moving away from their pattern. (SciPy reports
    only the earliest terminal event: a unit whose point is cut in the layer below can
    fire first, with zero rates, while the unit below that reopens the point sits at
    `p ≈ −1e-16`.)"""
    side = np.where(pattern, 1.0, -1.0)
    p = prob.preacts(theta)
    velocity = prob.pattern_rates(theta, pattern)
    moving = np.abs(velocity) > 1e-10 * np.max(np.abs(velocity), initial=0.0)
    at = side * p <= 1e-13 * np.max(np.abs(p), initial=1.0)
    return [int(i) for i in np.flatnonzero(at & (side * velocity < 0) & moving)]


def _scipy_segment(prob, theta, t, t1, pattern, rtol, atol):
    """One `solve_ivp` call from `t` with the pattern fixed, stopped by the first entry to
    reach its surface. Returns `(sol, watched)`: event function `k` watches entry `watched[k]`."""
    cache = {"t": None, "y": None, "p": None}

    def preacts_cached(s, y):
        if cache["t"] != s or not np.array_equal(cache["y"], y):
            cache["t"], cache["y"], cache["p"] = s, y.copy(), prob.preacts(y)
        return cache["p"]

    def make_event(index, side):
        def event(s, y):
            return preacts_cached(s, y)[index] + side * _TINY

        event.terminal = True
        event.direction = -side
        return event

    watched = np.flatnonzero(~prob.frozen(pattern))
    masks = prob.layout.masks(pattern)
    sol = scipy.integrate.solve_ivp(
        lambda s, y: prob.field(y, masks),
        (t, t1),
        theta,
        method="DOP853",
        rtol=rtol,
        atol=atol,
        events=[make_event(i, 1.0 if pattern[i] else -1.0) for i in watched] or None,
    )
    return sol, watched


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
    params, X, Y, t1, weight_decay, rtol, atol, max_events = _check_flow_args(
        params, X, Y, loss, t1, weight_decay, rtol, atol, max_events
    )
    prob = _Problem.of(params, X, Y, loss, weight_decay)
    theta = np.concatenate([W.ravel() for W in params])
    pattern = prob.preacts(theta) > 0
    t, crossings, nfev, n_events, slid = 0.0, [], 0, 0, False
    while t < t1 and not slid:
        sol, watched = _scipy_segment(prob, theta, t, t1, pattern, rtol, atol)
        nfev += int(sol.nfev)
        if sol.status == -1:
            raise RuntimeError(f"scipy_flow: solve_ivp failed at t={t}: {sol.message}")
        if sol.status == 0:
            theta, t = sol.y[:, -1], float(sol.t[-1])
            break
        # Terminal event: take the earliest root, whatever order SciPy lists them in.
        t_event, k = min((te[0], k) for k, te in enumerate(sol.t_events) if len(te))
        theta, t = np.array(sol.y_events[k][0]), float(t_event)
        pending = [int(watched[k])]
        while pending:
            index = pending.pop(0)
            n_events += 1
            if n_events > max_events:
                raise RuntimeError(f"scipy_flow: more than max_events={max_events} kinks before t={t} (t1={t1}).")
            verdict, pattern = _decide_kink(prob, theta, pattern, index)
            if verdict == "slide":
                slid = True
                break
            if verdict == "cross":
                crossings.append((t, *prob.layout.entry(index), 1 if pattern[index] else -1))
            if not pending:
                pending = _same_instant(prob, theta, pattern)
    return ReferenceResult([np.array(W) for W in prob.layout.unflatten(theta)], t, crossings, slid, nfev)


# --------------------------------------------------------------------------------------
# Filippov (sliding) gradient flow with SciPy
# --------------------------------------------------------------------------------------


def _affine_weights(Q):
    """Weights `a` (summing to 1) of the least-norm point `a @ Q` of the affine hull of
    the rows of `Q`: `q_0 + Σ_i b_i (q_i − q_0)` with `b` the least-squares solution of
    `Σ_i b_i (q_i − q_0) ≈ −q_0` (SVD based: dependent rows are harmless)."""
    if Q.shape[0] == 1:
        return np.ones(1)
    b = np.linalg.lstsq((Q[1:] - Q[0]).T, -Q[0], rcond=None)[0]
    return np.concatenate([[1.0 - b.sum()], b])


def _min_norm_sum(blocks, offset=None, tol=1e-15, start=None):
    """The point of least Euclidean norm in `offset + conv(B_1) + ... + conv(B_m)` (a
    Minkowski sum of hulls), by Wolfe's algorithm (P. Wolfe, "Finding the nearest point
    in a polytope", Math. Programming 11, 1976, 128-149) in its linear-oracle form.

    The polytope's vertices are the sums `offset + Σ_i B_i[v_i]`, one row of each block;
    they are never listed: the vertex minimising `⟨q, x⟩` is the sum of each block's row
    minimising it. The iterate `x` is the least-norm point of the affine hull of a
    *corral* `S` of vertices, with positive weights. A major cycle stops when `‖x‖² −
    ⟨q, x⟩ ≤ tol·scale` for that minimising vertex `q` (the optimality condition: no
    vertex lies on the origin's side of the hyperplane through `x` normal to `x`;
    `scale` bounds the vertices' squared norms), and otherwise adds `q` to `S`. A minor
    cycle then moves the weights toward the affine minimiser of `S`, stopping where the
    first weight reaches zero and dropping that vertex, until the affine minimiser has
    all weights positive.

    A warm start (`start`: the corral of a nearby problem) begins with those vertices at
    equal weights, a point of the hull, and a minor cycle; the stopping test, and so
    `x`, are those of a cold start.

    **Arguments:**

    - `blocks`: arrays of shape `(m_i, d)`, `m_i >= 1` (none: the point is `offset`).
    - `offset`: shape `(d,)`, or `None` (zero; not with no blocks).
    - `tol`: the relative optimality gap at which to stop.
    - `start`: a corral as returned (`S`: tuples of one row index per block), or `None`.

    **Returns:** `(x, weights, S)`: `x` of shape `(d,)` and, per block, weights of shape
    `(m_i,)`, `>= 0`, summing to 1, with `x = offset + Σ_i weights[i] @ B_i`; `S` the
    final corral.
    """
    B = [np.asarray(b, dtype=np.float64) for b in blocks]
    if not B:
        return np.array(offset, dtype=np.float64), [], []
    c = np.zeros(B[0].shape[1]) if offset is None else np.asarray(offset, dtype=np.float64)
    sq = [np.einsum("ij,ij->i", b, b) for b in B]
    scale = max((np.linalg.norm(c) + sum(float(np.sqrt(np.max(s))) for s in sq)) ** 2, _TINY)

    def vertex(choice):
        return c + sum(b[v] for b, v in zip(B, choice, strict=True))

    def minor(S, Q, w):
        """Toward the affine minimiser of `S` until its weights are all positive."""
        while True:
            a = _affine_weights(np.array(Q))
            if np.all(a > 0):
                return S, Q, a
            # Move from w toward a as far as w stays >= 0; drop the weight that hits 0.
            neg = np.flatnonzero(a <= 0)
            denom = w[neg] - a[neg]
            ratio = np.where(denom > 0, w[neg] / np.where(denom > 0, denom, 1.0), 0.0)
            k = int(np.argmin(ratio))
            w = (1.0 - ratio[k]) * w + ratio[k] * a
            w[neg[k]] = 0.0
            keep = w > 0
            S = [s for s, kept in zip(S, keep, strict=True) if kept]
            Q = [s for s, kept in zip(Q, keep, strict=True) if kept]
            w = w[keep]

    if start:
        S = list(dict.fromkeys(tuple(int(v) for v in choice) for choice in start))
    else:
        S = [tuple(int(np.argmin(s)) for s in sq)]
    Q = [vertex(choice) for choice in S]
    S, Q, w = minor(S, Q, np.full(len(S), 1.0 / len(S)))
    x = w @ np.array(Q)
    for _ in range(10 * sum(len(b) for b in B) + 100):
        j = tuple(int(np.argmin(b @ x)) for b in B)
        q = vertex(j)
        if x @ x - q @ x <= tol * scale or j in S:
            break
        S, Q, w = minor(S + [j], Q + [q], np.append(w, 0.0))
        if j not in S:  # the new vertex was dropped at once: no progress is possible
            break
        w = w / w.sum()
        x = w @ np.array(Q)
    weights = [np.zeros(len(b)) for b in B]
    for choice, wk in zip(S, w, strict=True):
        for i, v in enumerate(choice):
            weights[i][v] += wk
    return x, weights, S


def _entries_to_layers(layout, flat):
    """Flat `(..., P)` values in (layer, neuron, point) order → per hidden layer `(..., n, d_l)`."""
    o, lead = layout.entry_offsets, flat.shape[:-1]
    return [
        np.swapaxes(flat[..., o[i] : o[i + 1]].reshape(*lead, d, layout.n), -1, -2) for i, d in enumerate(layout.hidden)
    ]


def _layers_to_entries(arrays):
    """Per hidden layer `(..., n, d_l)` → flat `(..., P)` in (layer, neuron, point) order."""
    return np.concatenate([np.swapaxes(a, -1, -2).reshape(*a.shape[:-2], -1) for a in arrays], axis=-1)


def _surface_forward(params, X, hmasks):
    """Forward pass with `h_l = hmasks[l] ⊙ z_l` (float masks): `(Z, H, F)` as in `_forward`."""
    H, Z = [X], []
    for W, m in zip(params[:-1], hmasks, strict=True):
        z = H[-1] @ W.T
        Z.append(z)
        H.append(m * z)
    return Z, H, H[-1] @ params[-1].T


def _vertex_gradients(params, H, gmasks, G, weight_decay):
    """Loss gradients for a batch of `V` slope patterns, flat, shape `(V, |θ|)`.

    `gmasks[l]` of shape `(V, n, d_l)` holds the ReLU slopes used in the backward pass;
    the forward pass (`H`, and `G = ∂L/∂F`) is shared.
    """
    V = gmasks[0].shape[0] if gmasks else 1
    delta = np.broadcast_to(G, (V, *G.shape))
    parts = [None] * len(params)
    for i in reversed(range(len(params))):
        g = np.einsum("vnd,ne->vde", delta, H[i])
        if weight_decay:
            g = g + weight_decay * params[i]
        parts[i] = g.reshape(V, -1)
        if i > 0:
            delta = (delta @ params[i]) * gmasks[i - 1]
    return np.concatenate(parts, axis=1)


def _tangent_preactivations(params, X, hmasks, gmasks, velocities):
    """Rates `ṗ` of every hidden pre-activation for `B` velocities at once (forward mode).

    `velocities[l]` has shape `(B, d_l, d_{l-1})`, `gmasks[l]` shape `(B, n, d_l)` (the
    slopes through which a rate passes to the next layer); returns `(B, n, d_l)` per layer.
    """
    B = velocities[0].shape[0]
    h, dh, out = X, np.zeros((B, *X.shape)), []
    for W, dW, hm, gm in zip(params[:-1], velocities[:-1], hmasks, gmasks, strict=True):
        z = h @ W.T
        dz = dh @ W.T + np.einsum("ne,bde->bnd", h, dW)
        out.append(dz)
        h, dh = hm * z, gm * dz
    return out


class FilippovEvent(typing.NamedTuple):
    """One event of [`filippov_flow`][].

    - `t`: its time.
    - `layer`, `neuron`, `point`: the pre-activation (as in the module docstring).
    - `kind`: `"cross"` (passes through its surface), `"slide_start"` (stays on it),
      `"slide_end"` (leaves it after sliding).
    - `side`: the side it goes to: `+1` active, `−1` inactive, `0` for `"slide_start"`.
    """

    t: float
    layer: int
    neuron: int
    point: int
    kind: str
    side: int


@dataclasses.dataclass(frozen=True)
class FilippovResult:
    """What [`filippov_flow`][] returns.

    **Fields:**

    - `params`: the weights `[W_1, ..., W_k]` at time `t`.
    - `t`: the time reached (`t1`).
    - `events`: the [`FilippovEvent`][]s in time order (same-instant ones by flat index).
    - `ts`, `losses`, `energies`: the save times (`t_eval`), the loss `L(θ(t))`
      (weight decay included) and `E(t) = ∫₀ᵗ ‖θ̇‖² ds` at each, arrays of shape `(S,)`.
    - `initial_loss`, `loss`, `energy`: `L(θ(0))`, `L(θ(t))`, `E(t)`.
    - `sliding`: the `(layer, neuron, point)` sliding at `t`.
    - `drift`: the largest `|p|` of a sliding unit met at any accepted step or event:
      how far the flow left the surfaces it was meant to slide on.
    - `nfev`: the number of vector-field evaluations SciPy made.
    """

    params: list
    t: float
    events: list
    ts: np.ndarray
    losses: np.ndarray
    energies: np.ndarray
    initial_loss: float
    loss: float
    energy: float
    sliding: list
    drift: float
    nfev: int

    @property
    def energy_defect(self):
        """`|L(0) − L(t) − E(t)|` over the dissipated loss `max(|L(0) − L(t)|, E(t))`
        (at least `1e-14·|L(0)|`): zero for an exact flow."""
        drop = self.initial_loss - self.loss
        scale = max(abs(drop), abs(self.energy), 1e-14 * abs(self.initial_loss), _TINY)
        return abs(drop - self.energy) / scale


def _field_parts(prob, theta, pattern, K):
    """The hull `D(θ)` of the units `K` (the others by `pattern`) as a Minkowski sum, one
    block per data point that holds units of `K` (module docstring, "The field"):
    `(ps, hmasks, offset, blocks)` with `blocks[i] = (pos, bits, grads)`: `pos` the
    positions in `K` of the point's units, `bits` the `2^|pos|` slope vertices
    `(V, |pos|)` and `grads` the point's loss gradient at each `(V, |θ|)`; `offset` is
    the gradient of the other points, weight decay included."""
    layout = prob.layout
    ps = layout.unflatten(theta)
    base = pattern.astype(np.float64)
    base[K] = 0.0
    hmasks = _entries_to_layers(layout, base)
    _, H, F = _surface_forward(ps, prob.X, hmasks)
    G = _output_gradient(F, prob.Y, prob.loss)
    points = np.asarray(K, dtype=int) % layout.n
    blocks = []
    for i in np.unique(points):
        pos = np.flatnonzero(points == i)
        if len(pos) > _MAX_PER_POINT:
            raise RuntimeError(
                f"filippov_flow: {len(pos)} units on their surfaces at point {i}, more than "
                f"{_MAX_PER_POINT} (the field enumerates 2^{len(pos)} slope patterns there)."
            )
        bits = ((np.arange(2 ** len(pos))[:, None] >> np.arange(len(pos))) & 1).astype(np.float64)
        slopes = np.tile(base, (len(bits), 1))
        slopes[:, np.asarray(K)[pos]] = bits
        gmasks = [m[:, i : i + 1] for m in _entries_to_layers(layout, slopes)]
        grads = _vertex_gradients(ps, [h[i : i + 1] for h in H], gmasks, G[i : i + 1], 0.0)
        blocks.append((pos, bits, grads))
    rest = G.copy()
    rest[points] = 0.0
    offset = _vertex_gradients(ps, H, [m[None] for m in hmasks], rest, prob.weight_decay)[0]
    return ps, hmasks, offset, blocks


def _isometric(offset, blocks):
    """`_field_parts`'s `offset` and `blocks` in coordinates of an orthonormal basis of
    the span of their rows (Householder QR of the stacked rows: every inner product and
    norm is kept to round-off). The hull has `1 + Σ_i 2^|K_i|` generators, far fewer
    than `|θ|`, so Wolfe's iterations run in that much smaller space."""
    stacked = np.concatenate([offset[None]] + [grads for _, _, grads in blocks])
    if not blocks or stacked.shape[0] >= stacked.shape[1]:
        return offset, blocks
    coords = np.linalg.qr(stacked.T, mode="r").T
    ends = np.cumsum([1] + [len(grads) for _, _, grads in blocks])
    return coords[0], [
        (pos, bits, coords[a:b]) for (pos, bits, _), a, b in zip(blocks, ends[:-1], ends[1:], strict=True)
    ]


def _min_norm_field(offset, blocks, n_K, pin=None, reduced=None, start=None):
    """`(u, c, S)`: the min-norm point `u` of the hull of `_field_parts`, the
    equivalent slopes `c` `(n_K,)` of its weights and Wolfe's final corral `S`;
    `pin = (positions, bit)` restricts those units of `K` to the vertices with slope
    `bit`. Wolfe's iterations run on `reduced` (`_isometric(offset, blocks)`; default: the
    full space) from the corral `start` (`_min_norm_sum`; of the same pin), and `u` is
    assembled from their weights in the full space."""
    offset_r, blocks_r = (offset, blocks) if reduced is None else reduced
    vertices, full = [], []
    for (pos, bits, grads), (_, _, grads_r) in zip(blocks, blocks_r, strict=True):
        rows = slice(None) if pin is None else np.all(bits[:, np.isin(pos, pin[0])] == pin[1], axis=1)
        vertices.append((pos, bits[rows], grads_r[rows]))
        full.append(grads[rows])
    _, weights, S = _min_norm_sum([g for _, _, g in vertices], offset_r, start=start)
    u = sum((lam @ g for lam, g in zip(weights, full, strict=True)), offset)
    c = np.zeros(n_K)
    for (pos, bits, _), lam in zip(vertices, weights, strict=True):
        c[pos] = lam @ bits
    return u, c, S


def _sliding_rates(prob, ps, hmasks, pattern, K, velocities, controls):
    """`ṗ` of every entry `(B, P)` under `B` velocities with the slopes `controls` on `K`."""
    slopes = np.tile(pattern.astype(np.float64), (len(velocities), 1))
    slopes[:, K] = controls
    o = prob.layout.param_offsets
    vel = [velocities[:, o[i] : o[i + 1]].reshape(len(velocities), *W.shape) for i, W in enumerate(ps)]
    gmasks = _entries_to_layers(prob.layout, slopes)
    return _layers_to_entries(_tangent_preactivations(ps, prob.X, hmasks, gmasks, vel))


def _one_sided_tests(prob, theta, pattern, K, corrals=None):
    """`(s⁺, s⁻, scale)`: the one-sided tests of every unit of `K` (module docstring,
    "Sliding and leaving") and the largest rate met. Twins (`_twin_classes`) share one
    surface: they are pinned to one side together and share the tests of the one with
    the largest rates (the others' are positive multiples of them). The `2 × classes`
    min-norm points share one reduction of the hull (`_isometric`); `corrals` (a dict,
    updated) holds each pinned problem's last corral, a warm start for the next call
    with the same `pattern` and `K`."""
    ps, hmasks, offset, blocks = _field_parts(prob, theta, pattern, K)
    classes = _twin_classes(prob, theta, pattern, K)
    reduced = _isometric(offset, blocks)
    corrals = {} if corrals is None else corrals
    velocities, controls = [], []
    for positions in classes:
        for bit in (1.0, 0.0):
            key = (tuple(positions), bit)
            u, c, corrals[key] = _min_norm_field(
                offset, blocks, len(K), pin=(positions, bit), reduced=reduced, start=corrals.get(key)
            )
            velocities.append(-u)
            controls.append(c)
    r = _sliding_rates(prob, ps, hmasks, pattern, K, np.array(velocities), np.array(controls))
    sp, sm = np.zeros(len(K)), np.zeros(len(K))
    for q, positions in enumerate(classes):
        for s, row in ((sp, r[2 * q, K[positions]]), (sm, r[2 * q + 1, K[positions]])):
            s[positions] = row[np.argmax(np.abs(row))]
    return sp, sm, float(np.max(np.abs(r), initial=0.0))


def _layer_inputs(prob, theta, pattern, zero):
    """The inputs of every weight matrix by the pattern (`H[l]` that of `params[l]`, one
    row per point, `H[0] = X`), the units `zero` (on their surfaces) giving 0."""
    base = pattern.astype(np.float64)
    base[np.asarray(zero, dtype=int)] = 0.0
    return _surface_forward(prob.layout.unflatten(theta), prob.X, _entries_to_layers(prob.layout, base))[1]


def _parallel(u, v):
    """Whether `u` and `v` are nonzero and positive multiples of each other, to round-off:
    their directions `1e-12` apart at most (`1 − cos` is too coarse: computed to `ε`)."""
    nu, nv = np.linalg.norm(u), np.linalg.norm(v)
    return nu > 0 and nv > 0 and np.linalg.norm(u / nu - v / nv) <= 1e-12


def _lasting_multiples(H, layer, a, b):
    """Whether the inputs of `layer` at points `a` and `b` are positive multiples of each
    other (to round-off) for as long as the pattern holds, not only at this instant:
    the data themselves, or a single live input (the same unit), or the same live inputs
    computed from inputs of the layer below that are lasting multiples (ReLU is
    positively homogeneous). Inputs of two live units or more that are multiples by
    chance meet at an instant and part again."""
    if not _parallel(H[layer][a], H[layer][b]):
        return False
    return layer == 0 or np.count_nonzero(H[layer][a]) == 1 or _lasting_multiples(H, layer - 1, a, b)


def _twin_classes(prob, theta, pattern, K):
    """The units of `K` grouped by surface, as lists of positions in `K`: twins are units
    of one neuron at points whose inputs are lasting positive multiples of each other
    (`_lasting_multiples`, to round-off, the units of `K` counted as zero inputs), so
    that their pre-activations are positive multiples of each other while the pattern
    holds and vanish together (for instance where one unit is the only live input to a
    layer at two points; module docstring, "Events")."""
    H = _layer_inputs(prob, theta, pattern, K)
    entries = [prob.layout.entry(k) for k in K]
    classes, placed = [], set()
    for a, (layer, neuron, point) in enumerate(entries):
        if a in placed:
            continue
        classes.append([a])
        for b in range(a + 1, len(K)):
            if (
                b not in placed
                and entries[b][:2] == (layer, neuron)
                and _lasting_multiples(H, layer, point, entries[b][2])
            ):
                classes[-1].append(b)
                placed.add(b)
    return [np.array(c) for c in classes]


def _cut_off(prob, theta, pattern, candidates, j, leaving=()):
    """Whether unit `j` (of layer >= 1) gets zero input at its point and no candidate
    below it at that point can change that: `p_j ≡ 0` with zero gradient, so its slope
    changes nothing and it keeps its side. The units `leaving` their surfaces at this
    event count as zero inputs too: they sit on their surfaces (to the drift of the
    sliding they end), so `p_j` is 0 now and moves only as they move, which its event
    tells."""
    layer, _, point = prob.layout.entry(j)
    if layer == 0:
        return False
    H = _layer_inputs(prob, theta, pattern, list(candidates) + list(leaving))
    if np.any(H[layer][point] != 0):
        return False
    o, n = prob.layout.entry_offsets, prob.layout.n
    below = np.arange(o[layer - 1] + point, o[layer], n)  # layer - 1's units at this point
    return not any(k in candidates and not _cut_off(prob, theta, pattern, candidates, k, leaving) for k in below)


def _round_off_band(p):
    """How close to its surface a pre-activation counts as on it: `16·ε·max(1, max|p|)`."""
    return 16 * np.finfo(np.float64).eps * max(1.0, float(np.max(np.abs(p), initial=0.0)))


def _settle(prob, theta, pattern, K, forced, arrived, max_sliding, t):
    """The new `(pattern, K)` at a state on some surfaces (module docstring, "Events"):
    the units `forced` (`{j: side}`) go to their sides with their twins
    (`_twin_classes`), and the units of `K`, those that `arrived` and those within
    round-off of their surfaces are decided by the one-sided tests, twins together, until
    every unit left in `K` slides."""
    pattern = pattern.copy()
    forced = dict(forced)
    for positions in _twin_classes(prob, theta, pattern, np.asarray(K, dtype=int)):
        side = [forced[K[a]] for a in positions if K[a] in forced]
        forced.update((K[a], side[0]) for a in positions if side)
    for j, side in forced.items():
        pattern[j] = side > 0
    p = prob.preacts(theta)
    band = _round_off_band(p)
    side = np.where(pattern, 1.0, -1.0)
    near = np.flatnonzero(~prob.frozen(pattern, K) & (side * p <= band))
    slide = sorted((set(K) | set(arrived) | {int(j) for j in near}) - set(forced))
    slide = [j for j in slide if not _cut_off(prob, theta, pattern, slide, j, [k for k in forced if k in K])]
    for _ in range(2 * len(slide) + 2):
        if not slide:
            break
        if len(slide) > max_sliding:
            raise RuntimeError(
                f"filippov_flow: {len(slide)} units on their surfaces at once at t={t}, more than "
                f"max_sliding={max_sliding}."
            )
        sp, sm, scale = _one_sided_tests(prob, theta, pattern, np.array(slide))
        zero = 1e-10 * max(scale, _TINY)
        zp = np.where(np.abs(sp) <= zero, 0, np.sign(sp))
        zm = np.where(np.abs(sm) <= zero, 0, np.sign(sm))
        slides = (zm > 0) & (zp < 0)
        if slides.all():
            break
        active = ((zp > 0) & (zm >= 0)) | ((zp == 0) & (zm > 0))
        inactive = ((zm < 0) & (zp <= 0)) | ((zm == 0) & (zp < 0))
        keep = ~(slides | active | inactive)
        if keep.any():
            slide = [j for j, k in zip(slide, keep, strict=True) if not k]
            continue
        margin = np.where(active, np.abs(sp), np.abs(sm))
        margin[slides] = -1.0
        a = int(np.argmax(margin))
        twins = next(c for c in _twin_classes(prob, theta, pattern, np.array(slide)) if a in c)
        pattern[[slide[b] for b in twins]] = bool(active[a])
        slide = [j for b, j in enumerate(slide) if b not in twins]
    else:
        raise RuntimeError(f"filippov_flow: the sliding set did not settle at t={t}.")
    return pattern, slide


def _changes(prob, t, pattern0, K0, pattern, K):
    """The [`FilippovEvent`][]s at `t` that take `(pattern0, K0)` to `(pattern, K)`."""
    K0, K = set(K0), set(K)
    out = []
    for j in sorted(K0 | K | set(np.flatnonzero(pattern0 != pattern))):
        side = 1 if pattern[j] else -1
        if j in K and j not in K0:
            kind, side = "slide_start", 0
        elif j in K0 and j not in K:
            kind = "slide_end"
        elif j not in K and pattern0[j] != pattern[j]:
            kind = "cross"
        else:
            continue
        out.append(FilippovEvent(t, *prob.layout.entry(j), kind, side))
    return out


class _Segment(typing.NamedTuple):
    """What `_filippov_segment` integrated: `status` 0 (reached `t1`), 1 (an event: `event`,
    its index) or −1 (DOP853 failed: `message`); `t`, `y` where it stopped; `dense` the
    solution over the segment; `nfev` the field's evaluations."""

    status: int
    t: float
    y: np.ndarray
    event: int | None
    dense: scipy.integrate.OdeSolution
    nfev: int
    message: str


def _first_root(value, sol, t_old, t_new, g_old, g_new, directions):
    """The earliest root in `[t_old, t_new]` of the event functions `value(s, y)` (an array)
    whose values cross zero in their directions from `g_old` to `g_new` (SciPy's rule,
    roots by `brentq` on the dense output `sol`): `(t, k)`, or `None`."""
    up, down = (g_old <= 0) & (g_new >= 0), (g_old >= 0) & (g_new <= 0)
    roots = [
        (scipy.optimize.brentq(lambda s, k=k: value(s, sol(s))[k], t_old, t_new, xtol=4 * _EPS, rtol=4 * _EPS), k)
        for k in np.flatnonzero(up & (directions > 0) | down & (directions < 0))
    ]
    return min(roots, default=None)


def _to_first_event(rhs, t, y0, t1, rtol, atol, first_step, watched, tested):
    """DOP853 from `t` towards `t1`, stopped at the first event (module docstring,
    "Events"). `watched(s, y)` and `tested(s, y)` are the values of the two kinds of event
    function, each an array of `(values, directions)`: `watched` ones (cheap, a unit's
    `p`) are compared at `_SAMPLES` points of each step's dense output, `tested` ones (a
    sliding unit's one-sided tests, each a min-norm solve) at its ends, as SciPy does;
    their event indices follow the watched ones'. Returns a `_Segment`."""
    solver = scipy.integrate.DOP853(rhs, t, y0, t1, rtol=rtol, atol=atol, first_step=first_step)
    ts, pieces = [t], []
    gw, dw = watched(t, y0)
    gt, dt = tested(t, y0)
    while solver.status == "running":
        message = solver.step()
        if solver.status == "failed":
            return _Segment(-1, solver.t, solver.y, None, None, solver.nfev, message)
        piece, t_old = solver.dense_output(), solver.t_old
        hit, s_old = None, t_old
        for s in np.linspace(t_old, solver.t, _SAMPLES + 1)[1:]:
            gw_new = watched(s, solver.y if s == solver.t else piece(s))[0]
            hit = _first_root(lambda s, y: watched(s, y)[0], piece, s_old, s, gw, gw_new, dw)
            gw, s_old = gw_new, s
            if hit is not None:
                break
        gt_new = tested(solver.t, solver.y)[0]
        hit_t = _first_root(lambda s, y: tested(s, y)[0], piece, t_old, solver.t, gt, gt_new, dt)
        gt = gt_new
        if hit_t is not None and (hit is None or hit_t[0] < hit[0]):
            hit = (hit_t[0], len(gw) + hit_t[1])
        pieces.append(piece)
        ts.append(solver.t if hit is None else hit[0])
        if hit is not None:
            dense = scipy.integrate.OdeSolution(ts, pieces)
            return _Segment(1, hit[0], piece(hit[0]), int(hit[1]), dense, solver.nfev, "")
    return _Segment(0, solver.t, solver.y, None, scipy.integrate.OdeSolution(ts, pieces), solver.nfev, "")


def _filippov_segment(prob, theta, energy, t, t1, pattern, K, rtol, atol, first_step):
    """One DOP853 integration of `(θ, E)` from `t` with `K` and the pattern fixed, stopped
    by the first event (module docstring, "Events"). Returns `(segment, owners,
    drift_log)`: `owners[k]` names event `k` (`("p", j, 0)`: unit `j` reaches its surface;
    `("s", j, ±1)`: sliding unit `j` leaves to that side), `drift_log` the `(s, max_K |p|)`
    met where the tests were evaluated."""
    K_arr = np.array(K, dtype=int)
    rhs_cache, drift_log, corral, test_corrals = {}, [], [], {}

    def rhs(s, y):
        key = y.tobytes()
        if key not in rhs_cache:
            rhs_cache.clear()
            # Wolfe's iterations start from the last evaluation's corral: K and the
            # pattern, and so the hull's generators, are those of the whole segment.
            u, _, corral[:] = _min_norm_field(*_field_parts(prob, y[:-1], pattern, K_arr)[2:], len(K_arr), start=corral)
            rhs_cache[key] = np.concatenate([-u, [u @ u]])
        return rhs_cache[key]

    watched = np.flatnonzero(~prob.frozen(pattern, K_arr) & ~np.isin(np.arange(prob.n_entries), K_arr))
    # A unit fires once it is past its surface by TINY; one that starts within round-off
    # of it (the band of `_settle`), once it is past by that band; one that starts further
    # past (left on its side by the last event), once it is past by twice that. With no
    # offset its event function could start on the far side of 0 and never change sign,
    # and a unit held at `p ≈ 0` by round-off would fire again and again at one instant
    # (module docstring, "Events").
    p_start = prob.preacts(theta)
    band = _round_off_band(p_start)
    side = np.where(pattern[watched], 1.0, -1.0)
    offset = np.maximum(np.where(np.abs(p_start[watched]) <= band, band, _TINY), -2.0 * side * p_start[watched])

    def watched_values(s, y):
        return prob.preacts(y[:-1])[watched] + side * offset, -side

    def tested_values(s, y):
        if not len(K_arr):
            return np.zeros(0), np.zeros(0)
        p = prob.preacts(y[:-1])
        drift_log.append((s, float(np.max(np.abs(p[K_arr])))))
        sp, sm, _ = _one_sided_tests(prob, y[:-1], pattern, K_arr, test_corrals)
        return np.stack([sp, sm], axis=1).reshape(-1), np.tile([1.0, -1.0], len(K_arr))

    owners = [("p", int(j), 0) for j in watched] + [("s", int(j), d) for j in K for d in (1, -1)]
    segment = _to_first_event(
        rhs, t, np.concatenate([theta, [energy]]), t1, rtol, atol, first_step, watched_values, tested_values
    )
    return segment, owners, drift_log


def _run_key(params, X, Y, loss, weight_decay, rtol, atol, max_sliding, t_eval):
    """A digest of what decides a run of `filippov_flow`: the problem and the options that
    shape its trajectory (`t1` and `max_events` only end it)."""
    h = hashlib.sha256(repr((loss, float(weight_decay), float(rtol), float(atol), int(max_sliding))).encode())
    for a in [*params, X, Y, t_eval]:
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _write_checkpoint(path, key, **state):
    """`filippov_flow`'s state, with the run's key and gflow's version, as JSON (exact:
    Python writes each float as the shortest string that reads back to it)."""
    state["pattern"] = [bool(b) for b in state["pattern"]]
    state["K"] = [int(j) for j in state["K"]]
    state["events"] = [list(e) for e in state["events"]]
    write_json(path, dict(key=key, gflow=importlib.metadata.version("gflow"), **state))


def _read_checkpoint(path, key):
    """The state written by `_write_checkpoint` at `path` (`None` if there is none),
    checked against this run's key and gflow's version."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    version = importlib.metadata.version("gflow")
    if state.get("key") != key or state.get("gflow") != version:
        raise ValueError(
            f"`checkpoint` {str(path)!r} is of another run (gflow {state.get('gflow')}, this is {version}; "
            f"its problem and options {'match' if state.get('key') == key else 'differ'}): "
            "expected the state of this problem with the same loss, weight_decay, rtol, atol, max_sliding and t_eval."
        )
    state["theta"] = np.array(state["theta"], dtype=np.float64)
    state["pattern"] = np.array(state["pattern"], dtype=bool)
    return state


def _check_t_eval(t_eval, t1):
    """Save times: a 1-D nondecreasing array in `[0, t1]` (empty for `None`)."""
    if t_eval is None:
        return np.zeros(0)
    t_eval = np.array(t_eval, dtype=np.float64)
    if (
        t_eval.ndim != 1
        or not np.all(np.isfinite(t_eval))
        or np.any(np.diff(t_eval) < 0)
        or np.any(t_eval < 0)
        or np.any(t_eval > t1)
    ):
        raise ValueError(
            f"`t_eval` must be a 1-D nondecreasing array of times in [0, t1={t1}]; "
            f"got {t_eval if t_eval.size <= 8 else f'shape {t_eval.shape}'}."
        )
    return t_eval


def filippov_flow(
    params,
    X,
    Y,
    *,
    t1,
    loss="square",
    weight_decay=0.0,
    rtol=1e-12,
    atol=1e-14,
    t_eval=None,
    max_events=10_000,
    max_sliding=10,
    checkpoint=None,
    resume=False,
):
    """Integrate the Filippov gradient flow of a ReLU network of any depth, sliding
    included, with SciPy's `DOP853`, a NumPy backward pass and Wolfe's min-norm point.

    `θ̇ = −u`, `u` the minimum-norm element of the hull of the one-sided gradients of
    the units `K` on their surfaces, with `E(t) = ∫₀ᵗ ‖u‖² ds` integrated
    alongside; the field, the one-sided tests that decide which units slide and which
    leave to which side, and the events are derived in the module docstring ("The
    Filippov flow").

    **Arguments:**

    - `params`: `[W_1, ..., W_k]`, `W_l` of shape `(d_l, d_{l-1})`; not modified.
    - `X`: inputs, shape `(n, d_in)`.
    - `Y`: targets, shape `(n, d_out)`; `(n,)` labels for the margin losses.
    - `t1`: the final time, `>= 0`.
    - `loss`: one of `"square"`, `"mse"`, `"exponential"`, `"logistic"`.
    - `weight_decay`: `λ >= 0`; the flow is that of `L + (λ/2)‖θ‖²`.
    - `rtol`, `atol`: DOP853's tolerances.
    - `t_eval`: nondecreasing save times in `[0, t1]`, or `None` (none).
    - `max_events`: the most event resolutions before giving up with `RuntimeError`.
    - `max_sliding`: the most units that may slide at once. A field evaluation costs
      `2^k` one-point backward passes for each point with `k` units on their surfaces;
      more than 16 at one point raise `RuntimeError`.
    - `checkpoint`: a path, or `None`. The run's state is written there (JSON, atomically)
      at its start and after every event: the weights, the energy, the sliding set and
      sides, the events and save times so far. Each segment of the flow starts afresh at
      an event, so that state is all a continuation needs.
    - `resume`: with `checkpoint`, continue from the state written there, if any, to
      `t1` (with the `t1` of the interrupted call, the result of one uninterrupted call to
      the last bit). The file must be
      of the same problem, `loss`, `weight_decay`, `rtol`, `atol`, `max_sliding` and
      `t_eval`, and of the same gflow version (else `ValueError`); `t1` and
      `max_events` may differ.

    **Returns:** a [`FilippovResult`][].

    **Raises:** `ValueError` on malformed input; `RuntimeError` if SciPy fails, or more
    than `max_events` events, `max_sliding` sliding units or 16 units on their
    surfaces at one point are met; its `partial` attribute is then the
    [`FilippovResult`][] of the run up to the time it stopped (`t`, the state, the events
    and the save times reached).

    **Example:** a depth-3 net, its events and the energy identity:

        params = [rng.normal(size=(5, 3)), rng.normal(size=(5, 5)), rng.normal(size=(1, 5))]
        res = filippov_flow(params, X, Y, t1=5.0, t_eval=np.linspace(0, 5, 11))
        [e for e in res.events if e.kind != "cross"], res.energy_defect, res.drift
    """
    params, X, Y, t1, weight_decay, rtol, atol, max_events = _check_flow_args(
        params, X, Y, loss, t1, weight_decay, rtol, atol, max_events
    )
    max_sliding = _check_count(max_sliding, "max_sliding")
    t_eval = _check_t_eval(t_eval, t1)
    if resume and checkpoint is None:
        raise ValueError("`resume=True` needs `checkpoint` (the path of the state to continue from).")
    prob = _Problem.of(params, X, Y, loss, weight_decay)
    key = _run_key(params, X, Y, loss, weight_decay, rtol, atol, max_sliding, t_eval)
    theta = np.concatenate([W.ravel() for W in params])
    initial_loss = prob.loss_of(prob.layout.unflatten(theta))
    state = _read_checkpoint(checkpoint, key) if resume else None
    if state is None:
        energy, t, nfev, n_events, drift, saved = 0.0, 0.0, 0, 0, 0.0, []
        pattern, K = _settle(prob, theta, prob.preacts(theta) > 0, [], {}, [], max_sliding, t)
        events = _changes(prob, 0.0, prob.preacts(theta) > 0, [], pattern, K)
        first_step = None  # SciPy's own choice, except after a crossing (module docstring, "Events")
    else:
        theta, energy, t, nfev, n_events, drift = (
            state[k] for k in ("theta", "energy", "t", "nfev", "n_events", "drift")
        )
        pattern, K, first_step = state["pattern"], state["K"], state["first_step"]
        events = [FilippovEvent(*e) for e in state["events"]]
        saved = [tuple(s) for s in state["saved"]]

    def save():
        if checkpoint is not None:
            _write_checkpoint(checkpoint, key, theta=theta, energy=energy, t=t, nfev=nfev, n_events=n_events,
                              drift=drift, pattern=pattern, K=K, first_step=first_step, events=events, saved=saved)  # fmt: skip

    if state is None:
        save()

    def result():
        ps = [np.array(W) for W in prob.layout.unflatten(theta)]
        return FilippovResult(
            params=ps,
            t=t,
            events=events,
            ts=np.array([s for s, _, _ in saved]),
            losses=np.array([v for _, v, _ in saved]),
            energies=np.array([e for _, _, e in saved]),
            initial_loss=initial_loss,
            loss=prob.loss_of(ps),
            energy=energy,
            sliding=[prob.layout.entry(j) for j in K],
            drift=drift,
            nfev=nfev,
        )

    try:
        while t < t1:
            seg, owners, drift_log = _filippov_segment(prob, theta, energy, t, t1, pattern, K, rtol, atol, first_step)
            nfev += int(seg.nfev)
            if seg.status == -1:
                raise RuntimeError(f"filippov_flow: DOP853 failed at t={seg.t}: {seg.message}")
            # Sliding units leave their surfaces after a leaving event: judge the drift before it.
            drift = max([drift] + [v for s_log, v in drift_log if s_log <= seg.t])
            for s in t_eval[len(saved) :][t_eval[len(saved) :] <= seg.t]:
                y_save = seg.dense(s)
                saved.append((s, prob.loss_of(prob.layout.unflatten(y_save[:-1])), y_save[-1]))
            theta, energy, t = seg.y[:-1], float(seg.y[-1]), float(seg.t)
            if seg.status == 0:
                break
            n_events += 1
            if n_events > max_events:
                raise RuntimeError(f"filippov_flow: more than max_events={max_events} events before t={t} (t1={t1}).")
            what, j, side = owners[seg.event]
            first_step = min(_FIRST_STEP * max(1.0, t), t1 - t) if what == "p" and t < t1 else None
            if len(K):
                drift = max(drift, float(np.max(np.abs(prob.preacts(theta)[np.array(K)]))))
            forced, arrived = ({j: side}, []) if what == "s" else ({}, [j])
            new_pattern, new_K = _settle(prob, theta, pattern, K, forced, arrived, max_sliding, t)
            events += _changes(prob, t, pattern, K, new_pattern, new_K)
            pattern, K = new_pattern, new_K
            save()
    except RuntimeError as e:
        e.partial = result()  # the run up to where it stopped: a long run is not lost
        raise
    # Save times the segments did not reach (t1 = 0, or an event at t1).
    saved += [(s, prob.loss_of(prob.layout.unflatten(theta)), energy) for s in t_eval[len(saved) :]]
    return result()


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
