"""The sliding velocity: equivalent controls of units held on their surfaces, and what a
kink decides.

**The field on the surfaces.** At a state where a set ``K`` of hidden units sits on
its surfaces ``p_j = 0``, write ``g(c)`` for the loss gradient with unit ``j``'s ReLU
slope set to ``c_j ∈ [0, 1]`` (1: active, 0: inactive) and every other unit's slope
fixed by its side. ``σ(0) = 0``, so the forward pass does not depend on ``c``; the
backward pass multiplies each signal by one slope per unit, so ``g`` is affine in the
slopes of one layer and multi-affine across layers (depth 2: affine). The
backpropagation gradients with slopes in ``[0, 1]`` form a conservative field of the
loss (Bolte and Pauwels 2021), ``D(θ) = conv{g(c) : c ∈ [0, 1]^K}``, and along any
absolutely continuous curve ``dL/dt = ⟨d, θ̇⟩`` for every ``d ∈ D(θ)`` and almost
every ``t``. A gradient-flow curve ``θ̇ = −u``, ``u ∈ D``, therefore has
``⟨d, u⟩ = ‖u‖²`` for all ``d ∈ D``: ``u`` is the minimum-norm element of ``D``, and

    L(θ(0)) − L(θ(t)) = ∫₀ᵗ ‖θ̇‖² ds.

**Controls.** Let ``ṗ_j(c) = ∇p_j · (−g(c))`` be unit ``j``'s rate under the field with
slopes ``c``. It is affine in ``c_j`` (only the field's term through ``j`` depends on
it; ``j``'s output is 0), with slope ``d_j = ∂ṗ_j/∂c_j``: a surface both of whose sides
push into it has ``ṗ_j(0) > 0 > ṗ_j(1)``, ``d_j < 0``. While the units of ``K`` stay
on their surfaces, the curve lies where all the one-sided losses agree, so every
``g(c)`` that keeps them there (``ṗ_K(c) = 0``) has the same inner product with ``θ̇``:
such a ``g(c)`` *is* the minimum-norm element, and the energy identity holds.
Between kinks the engine holds the sliding set by solving ``ṗ_K(c) = 0`` for ``c``
(quasi-Newton iterations from the last controls, :func:`_newton_controls`); a
unit's guard fires when its control leaves ``[0, 1]``.

**At a kink.** A unit whose surface is reached, a sliding unit whose control reaches 0
or 1, and every other sliding unit are decided together, by the box complementarity
problem in ``c ∈ [0, 1]^K``: for each ``j``

- ``0 < c_j < 1`` and ``ṗ_j(c) = 0``: ``j`` slides (stays on its surface);
- ``c_j = 0`` and ``ṗ_j(c) ≤ 0``: ``j`` leaves to (or stays on) its inactive side;
- ``c_j = 1`` and ``ṗ_j(c) ≥ 0``: ``j`` leaves to (or stays on) its active side.

Each such solution is a consistent local continuation: the units that leave move off
their surfaces with the slopes of the sides they go to, and those that stay keep
``ṗ = 0``. In fixed-point form ``c = Π(c + ṗ(c)/s)``, ``Π`` the projection onto the box
and ``s_j = |d_j|`` (floored) a scale that makes ``c_j + ṗ_j/s_j`` the Newton estimate
of ``j``'s own control when ``d_j < 0``. :func:`complementarity` solves it by the
semismooth Newton method on that natural residual — a primal–dual active-set method:
units whose estimate lies outside ``[0, 1]`` are fixed at that bound, the others take a
(damped) Newton step on their rates — warm-started from each unit's present slope (the
control of a sliding unit, the slope of the side a unit arrives from). The iterations
stop when the active set repeats and the free units' rates are at ``_NEWTON_TOL``
relative to their sensitivity. The decision of which units leave, and to which side,
is read off the solution: nothing else decides it.

Twins (units of one neuron whose pre-activations are positive multiples of each other,
:mod:`gflow.twins`) share one surface and one control: every solve here takes a slot map
``tie`` under which a class's passengers take their carrier's control.

Where the problem has several solutions (a *repelling* surface, ``ṗ_j(0) < 0 <
ṗ_j(1)``, which a unit can only start on: both sides are consistent), the solver keeps
the side the unit starts from: the warm start is a solution and the active set does
not change. A unit whose rate does not depend on its slope and is zero (a point cut off
from the data by the layers below, :meth:`gflow.events.System.cut`) is left where it
starts; the engine makes such units inactive by ``σ'(0) = 0``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

_SIGN_TOL = 1e-10  # relative tolerance deciding the sign of a one-sided rate ṗ
_NEWTON_TOL = 1e-13  # sliding rates / their sensitivity to the controls at which Newton stops
_NEWTON_MAX = 12  # Newton steps at most (singular or disconnected controls)
_NEWTON_NOISE = 1e-6  # below this (same measure), a step that fails to halve the rates meets round-off
_CHORD_MAX = 20  # quasi-Newton steps at most (_chord)
# Sensitivities of the sliding rates to their controls below this count as none. A unit
# whose weights weight decay shrinks towards 0 reaches its surface with rates and
# sensitivity at 1e-127 (depth 4, λ = 1e-2, t ≈ 9e4); damping relative to such a J
# underflows in the derivative the implicit solvers take (J⁴), and the step went non-finite.
_SENSITIVITY_FLOOR = 1e-50


def _with_controls(base, idx, valid, cK, tie=None):
    """``base`` (slopes or controls, ``(P,)``) with ``cK`` written at the sliding slots
    ``idx``. Slots not ``valid`` must hold ``P`` (they are written past the end). ``tie``
    ``(K,)``: the slot whose control each slot takes (a twin class's carrier,
    :mod:`gflow.twins`; its own slot otherwise)."""
    cK = cK if tie is None else cK[tie]
    return jnp.append(base, 0.0).at[idx].set(jnp.where(valid, cK, 0.0))[: base.shape[0]]


def _riders(tie):
    """The slots that take another slot's control (``tie``, :func:`_with_controls`)."""
    return tie != jnp.arange(tie.shape[0])


def _rates_residual(system, cK, *, y, data, base, idx, valid, tie=None):
    """The sliding units' rates ``ṗ`` with controls ``cK`` in slots ``idx`` (unused slots:
    ``cK`` itself, an identity row; slots tied to another, ``tie``: 0, their rates being
    multiples of their carrier's)."""
    _, pdot = system.field_and_rates(y, data, _with_controls(base, idx, valid, cK, tie))
    r = jnp.where(valid, jnp.append(pdot, 0.0)[idx], cK)
    return r if tie is None else jnp.where(_riders(tie), 0.0, r)


def _residual_and_jacobian(system, cK, *, y, data, base, idx, valid, tie=None, noise=False, rho=0.0):
    """:func:`_rates_residual` and its Jacobian in ``cK`` (:meth:`System.rates_jacobian`;
    unused slots: identity rows and columns); with ``noise``, also each rate's round-off
    ``64·(ε + ρ)·‖∇p_j‖·‖θ̇‖`` (a rate below it is zero: it cannot be told from zero),
    ``ρ`` the field's relative round-off beyond that of the passes (0, or the loss's:
    :meth:`System.output_round_off`). With ``tie``, a carrier's column is the sum of its
    class's columns (their slopes move with its control) and a tied slot's row is its
    carrier's sensitivity on the diagonal (decoupled, its residual 0)."""
    slopes = _with_controls(base, idx, valid, cK, tie)
    field, pdot = system.field_and_rates(y, data, slopes)
    r = jnp.where(valid, jnp.append(pdot, 0.0)[idx], cK)
    J, norms = system.rates_jacobian(y, data, slopes, field, idx, norms=True)
    K = idx.shape[0]
    J = jnp.where(valid[:, None] & valid[None, :], J, jnp.eye(K))
    if tie is not None:
        J = J @ (tie[:, None] == jnp.arange(K)[None, :]).astype(J.dtype)
        own = jnp.maximum(jnp.abs(jnp.diagonal(J))[tie], _SENSITIVITY_FLOOR)
        J = jnp.where(_riders(tie)[:, None], jnp.diag(own), J)
        r = jnp.where(_riders(tie), 0.0, r)
    if noise:
        return J, r, 64.0 * (jnp.finfo(field.dtype).eps + rho) * norms * jnp.linalg.norm(field)
    return J, r


def _damped_inverse(J, valid):
    """``J⁻¹`` (as ``(JᵀJ + μI)⁻¹Jᵀ``) with Levenberg–Marquardt damping ``μ = (1e-7·scale)²``,
    which keeps it finite where a control has (almost) no effect on the rates (e.g. a unit
    disconnected downstream); and ``scale``, the largest ``|J|`` among the sliding units
    (``valid`` slots: the identity rows of unused slots do not count), at least
    ``_SENSITIVITY_FLOOR``. The damping is relative to the rates' own sensitivity: near a
    stationary point of weight decay ``J`` can be 1e-9, where a fixed damping of 1e-14
    would shorten each Newton step to a fraction of a percent and leave the controls near
    their start."""
    both = valid[:, None] & valid[None, :]
    mu, scale = _damping(jnp.max(jnp.where(both, jnp.abs(J), 0.0)))
    return _solve_small(J.T @ J + mu * jnp.eye(J.shape[0]), J.T), scale


def _damping(sensitivity):
    """``(μ, scale)``: the sliding rates' sensitivity to their controls floored at
    ``_SENSITIVITY_FLOOR`` (``scale``), and the Levenberg–Marquardt damping ``(1e-7·scale)²``."""
    scale = jnp.maximum(sensitivity, _SENSITIVITY_FLOOR)
    return (1e-7 * scale) ** 2, scale


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _newton_controls(system, y, data, c, base, idx, valid, tie, chord):
    """Deep networks' sliding controls, from the last controls ``c``.

    With ``chord`` (the damped inverse of the rates' Jacobian at the step's start,
    :meth:`System.chord`): quasi-Newton iterations from it (:func:`_chord`, Broyden's
    updates), each one rate evaluation; the rates are multilinear in the controls and
    ``c`` is close, so they converge in a few. Where they stop short of the tolerance (at
    round-off, or after ``_CHORD_MAX``) the last point kept is returned, as Newton's
    method returns its last after ``_NEWTON_MAX`` steps: the step's error control judges
    the field it gives. (Rejecting such steps instead, as NaN controls, was tried: on a
    depth-4 problem of ``tests/test_flow.py`` the controls stalled at round-off above
    ``_NEWTON_NOISE`` at every step size, and the run spent its step budget at
    ``t = 27.3``.) No Newton fallback with a new Jacobian:
    it was a copy of the Jacobian in every place that solves the controls (stages,
    guards, event location), a fifth of a deep program's operations, and chord
    iterations without Broyden's updates needed it in about a third of the solves there.
    Without ``chord``, Newton's method from ``c``: a chord's own Jacobian would be one
    more copy of it in the compiled program.
    Both stop once the rates, relative to their sensitivity to the controls, are at
    ``_NEWTON_TOL``, or once a step fails to halve them below ``_NEWTON_NOISE`` (there the
    iterations would converge quadratically, so only round-off stops them: when the rates
    are a small difference of large terms, near a stationary point, their round-off can
    sit above ``_NEWTON_TOL``), and take one more step from there.
    The loops are never differentiated: the derivative (implicit solvers differentiate
    the field) comes from the implicit function theorem at the solution
    (:func:`_newton_controls_jvp`)."""
    kw = dict(y=y, data=data, base=base, idx=idx, valid=valid, tie=tie)

    def newton(carry):
        c, res, _, _, i = carry
        J, r = _residual_and_jacobian(system, c, **kw)
        inverse, scale = _damped_inverse(J, valid)
        # ``prev``: the residual one step back (none for the first).
        return c - inverse @ r, jnp.max(jnp.abs(r)), jnp.where(i == 0, jnp.inf, res), scale, i + 1

    def unsolved(carry):
        _, res, prev, scale, i = carry
        stalled = (res > 0.5 * prev) & (res <= _NEWTON_NOISE * scale)
        return (i < _NEWTON_MAX) & (res > _NEWTON_TOL * scale) & ~stalled

    if chord is None:
        return jax.lax.while_loop(unsolved, newton, (c, jnp.asarray(jnp.inf), jnp.asarray(jnp.inf), jnp.ones(()), 0))[0]
    return _chord(functools.partial(_rates_residual, system, **kw), *chord, c)[0]


def _chord(residual, inverse, scale, c):
    """Quasi-Newton iterations ``c ← c − H·r(c)`` on the rates ``residual`` (a function of
    the slots' controls) from ``H = inverse``, at most ``_CHORD_MAX``, until the rates are
    at ``_NEWTON_TOL`` of ``scale``. After each step ``s`` that changed the rates by
    ``Δr``, ``H`` takes Broyden's ("good") rank-one update, ``H ← H + (s − HΔr)(sᵀH) /
    (sᵀHΔr)``, so that it maps ``Δr`` to ``s``: the iterations converge superlinearly
    where a fixed ``inverse`` (a chord) would converge linearly, at the rate of its
    Jacobian's mismatch. A step that fails to halve the rates is not kept, but its
    secant pair updates ``H`` all the same and the step is taken again from the last
    point kept; only below ``_NEWTON_NOISE`` of ``scale`` (round-off) does such a step end
    the iterations. (Ending them at the first failed step, as before 0.5.9, left sliding
    rates far above round-off, 6e-5 of their scale and more, where the Jacobian had moved
    since the step's start: on the 10-point Scale problem sliding units drifted from
    4.5e-10 to 7.6e-9 off their surfaces within one save interval.) Returns ``(c, res)``:
    the last point kept, one more step from it if its rates are at that tolerance, and its
    largest rate (before that step). The first pass of the loop evaluates the rates at
    ``c`` itself (a zero step), so the program holds one copy of them."""

    def chord_step(carry):
        c, step, r_old, H, res, i, _ = carry
        r = residual(c - step)
        res_new = jnp.max(jnp.abs(r))
        # Kept only while the residual at least halves (a far start, e.g. no warm
        # controls, can make the iterations diverge).
        good = res_new <= 0.5 * res
        # Broyden's update of the inverse, from a kept step or a failed one alike: H maps
        # the rates' change to the step that made it.
        s, dr = -step, r - r_old
        Hdr = H @ dr
        denom = jnp.dot(s, Hdr)
        update = (i > 0) & jnp.isfinite(res_new) & (jnp.abs(denom) > 1e-12 * jnp.linalg.norm(s) * jnp.linalg.norm(Hdr))
        H = jnp.where(update, H + jnp.outer(s - Hdr, s @ H) / jnp.where(update, denom, 1.0), H)
        r_keep = jnp.where(good, r, r_old)
        # A failed step above round-off is taken again from the last point kept, with the
        # updated H; one at round-off ends the iterations (as Newton's method's stall).
        more = good | (update & (res > _NEWTON_NOISE * scale))
        return (
            jnp.where(good, c - step, c), H @ r_keep, r_keep, H,
            jnp.where(good | (i == 0), res_new, res), i + 1, more,
        )  # fmt: skip

    def chord_unsolved(carry):
        *_, res, i, more = carry
        return more & (i <= _CHORD_MAX) & (res > _NEWTON_TOL * scale)

    start = (c, jnp.zeros_like(c), jnp.zeros_like(c), inverse, jnp.asarray(jnp.inf, c.dtype), 0, jnp.ones((), bool))
    c, step, _, _, res, _, _ = jax.lax.while_loop(chord_unsolved, chord_step, start)
    return jnp.where(res > _NEWTON_TOL * scale, c, c - step), res


@_newton_controls.defjvp
def _newton_controls_jvp(system, primals, tangents):
    """``J·dc = −dr``: the rates stay zero to first order."""
    y, data, c0, base, idx, valid, tie, _ = primals
    c = _newton_controls(system, *primals)
    J, _ = _residual_and_jacobian(system, c, y=y, data=data, base=base, idx=idx, valid=valid, tie=tie)
    residual = functools.partial(_rates_residual, system, base=base, idx=idx, valid=valid, tie=tie)
    _, r_dot = jax.jvp(lambda y, data: residual(c, y=y, data=data), (y, data), tuple(tangents[:2]))
    return c, -_damped_inverse(J, valid)[0] @ r_dot


def _solve_small(A, b):
    """Solve ``A x = b`` for small ``(..., n, n)`` systems (any leading axes; ``b`` is
    ``(..., n)`` or a matrix ``(..., n, m)`` of right-hand sides) by Gauss–Jordan
    elimination with partial pivoting, written with selects only: under ``vmap`` on CPU
    this is far cheaper than a batched LAPACK call for the tiny systems of sliding
    controls, and it fuses with the code around it. Up to ``_UNROLL_COLUMNS`` columns the
    elimination is written out; above, one column per iteration of a loop, whose program
    does not grow with ``n`` (the same operations, so the same result to the bit)."""
    n = A.shape[-1]
    vector = b.ndim == A.ndim - 1
    M = jnp.concatenate([A, b[..., None] if vector else b], axis=-1)
    rows = jnp.arange(n)

    def eliminate(col, M):
        piv = jnp.argmax(jnp.where(rows >= col, jnp.abs(jnp.take(M, col, axis=-1)), -1.0), axis=-1)
        is_piv = (rows == piv[..., None])[..., None]  # (..., n, 1)
        row_piv = jnp.sum(jnp.where(is_piv, M, 0.0), axis=-2, keepdims=True)
        row_col = jax.lax.dynamic_slice_in_dim(M, col, 1, axis=-2)
        is_col = (rows == col)[:, None]
        M = jnp.where(is_col, row_piv, jnp.where(is_piv, row_col, M))
        pivot = jax.lax.dynamic_slice_in_dim(M, col, 1, axis=-2)
        pivot_row = pivot / jax.lax.dynamic_slice_in_dim(pivot, col, 1, axis=-1)
        return jnp.where(is_col, pivot_row, M - jax.lax.dynamic_slice_in_dim(M, col, 1, axis=-1) * pivot_row)

    if n <= _UNROLL_COLUMNS:
        for col in range(n):
            M = eliminate(col, M)
    else:
        M = jax.lax.fori_loop(0, n, eliminate, M)
    return M[..., :, n] if vector else M[..., :, n:]


# Gauss–Jordan columns written out (more: a loop, see _solve_small): up to the depth-2
# block solves of ``events._BLOCK_POINTS`` points, whose run time was measured written out.
_UNROLL_COLUMNS = 5


_CP_MAX = 48  # semismooth Newton steps at most at one kink
SOLVED = 1e-6  # the natural residual (in units of the controls) up to which a kink counts as decided
_CP_FULL = 12  # of which with the whole bound set updated at each
_ROUNDS = 5  # runs of those steps, each from another start (complementarity)
_DESCENT_MAX = 200  # projected gradient steps at most where they fail
_CP_DAMPING = 1e-20  # the least Levenberg–Marquardt damping of its steps (rows scaled to unit sensitivity)


class Decision(NamedTuple):
    """The solution of the box complementarity problem at a kink, per slot ``(K,)``.

    - ``control``: the slopes ``c`` (0 or 1 for a unit that leaves).
    - ``slide``: the unit stays on its surface (``0 < c < 1``, rate zeroed).
    - ``up``: the unit goes to (or stays on) its active side (``c = 1``, ``ṗ ≥ 0``);
      neither ``slide`` nor ``up``: its inactive side (``c = 0``, ``ṗ ≤ 0``).
    - ``a_plus``, ``a_minus``: its one-sided rates ``ṗ_j`` with its own slope set to 1
      and to 0, the others at the solution.
    - ``residual``: the largest violation of the conditions, in units of the controls
      (``|c − Π(c + ṗ/s)|``); at most ``_NEWTON_NOISE`` when solved.
    - ``iterations``: the Newton steps taken.
    """

    control: jax.Array
    slide: jax.Array
    up: jax.Array
    a_plus: jax.Array
    a_minus: jax.Array
    residual: jax.Array
    iterations: jax.Array


def _natural_map(J, r, c, valid, coupled=False):
    """The box problem's pieces at ``c``: per slot the scale ``s`` (own sensitivity
    ``|d_j| = |∂ṗ_j/∂c_j|``, floored at ``1e-7`` of the largest), each unit's estimate
    ``z`` of its own control with the others fixed, and the bound masks ``(lo, hi)``
    where ``z`` leaves ``[0, 1]``. With ``coupled`` (may be traced), ``z = c + ṗ/s`` for
    every unit: the problem's natural map as stated, whatever the signs of ``d``.

    A unit both of whose sides push into its surface has ``d_j < 0``, and ``z = c +
    ṗ/s`` is the Newton estimate of the control that zeroes its rate. With ``d_j ≥ 0``
    its rate grows with its slope, and alone it never slides (the root of its rate, if
    inside, is unstable): it goes to the side its rates allow, ``ṗ_j(1) ≥ 0`` active,
    ``ṗ_j(0) ≤ 0`` inactive; where both allow it, the side its slope is closest to if that side's
    field pushes away from the surface (a repelling surface), else the inactive side
    (``σ'(0) = 0``: a tangent active field does not hold a unit active)."""
    both = valid[:, None] & valid[None, :]
    _, scale = _damping(jnp.max(jnp.where(both, jnp.abs(J), 0.0)))
    d = jnp.diagonal(J)
    s = jnp.maximum(jnp.abs(d), 1e-7 * scale)
    r = jnp.where(valid, r, 0.0)
    a_plus, a_minus = r + (1.0 - c) * d, r - c * d
    side = jnp.where((a_minus > 0.0) | ((a_plus > 0.0) & (c >= 0.5)), 2.0, -1.0)
    z = jnp.where((d < -_SENSITIVITY_FLOOR) | coupled, c + r / s, side)
    return s, z, valid & (z <= 0.0), valid & (z >= 1.0)


def _active_set(system, kw, c0, hold, rate_floor, coupled, rho, fixed):
    """The active-set iterations of :func:`complementarity` from ``c0`` with the units in
    ``hold`` held and those in ``fixed`` kept at ``c0`` (``coupled``: :func:`_natural_map`;
    ``rho``: :func:`_residual_and_jacobian`); returns the point with the least natural
    residual as ``(c, (J, r, s, lo, hi), residual, iterations)``."""
    valid = kw["valid"]
    K = valid.shape[0]
    eye = jnp.eye(K)

    def linearise(c, held):
        """The linearisation at ``c`` with the ``held`` units at their bounds, its natural
        residual, and each unit's own (that of a held unit as if it were free)."""
        J, r, noise = _residual_and_jacobian(system, c, **kw, noise=True, rho=rho)
        noise = jnp.maximum(noise, rate_floor)
        # A held unit keeps its side only where its rate clearly points into it (σ'(0) = 0:
        # a tangent field does not hold a unit on its active side).
        d = jnp.diagonal(J)
        a_plus, a_minus = r + (1.0 - c) * d, r - c * d
        tol = jnp.maximum(_SIGN_TOL * (jnp.abs(a_plus) + jnp.abs(a_minus)), noise)
        holds = jnp.where(c0 >= 1.0, a_plus > tol, a_minus < -tol)
        r = jnp.where(jnp.abs(r) <= noise, 0.0, r)  # rates at round-off are zero
        s, z, lo, hi = _natural_map(J, r, c, valid, coupled)
        lo, hi = lo & ~fixed, hi & ~fixed
        own = jnp.where(valid & ~fixed, jnp.abs(c - jnp.clip(z, 0.0, 1.0)), 0.0)
        own = jnp.where(held, jnp.where(holds, 0.0, jnp.maximum(own, 2.0 * _NEWTON_NOISE)), own)
        lo, hi = jnp.where(held, c0 <= 0.0, lo), jnp.where(held, c0 >= 1.0, hi)
        residual = jnp.max(jnp.where(held, 0.0, own))
        return (J, jnp.where(valid, r, 0.0), s, lo, hi), residual, own

    def newton(c, lin):
        """The step from ``c``: bound units to their bounds, the free units' rates
        linearised with the bound units' moves taken into account."""
        J, r, s, lo, hi = lin
        free = valid & ~lo & ~hi & ~fixed
        target = jnp.where(fixed, c, jnp.where(hi, 1.0, 0.0))
        moved = jnp.where(valid & ~free, target - c, 0.0)
        both = free[:, None] & free[None, :]
        A = jnp.where(both, J / s[:, None], eye)
        b = jnp.where(free, -(r + J @ moved) / s, 0.0)
        delta = _solve_small(A.T @ A + _CP_DAMPING * eye, A.T @ b)
        return jnp.where(valid, jnp.where(free, c + delta, target), c)

    def step(carry):
        c, lo, hi, held, prev, _, best, it, since = carry
        lin, res, own = linearise(c, held)
        stalled = (res > 0.5 * prev) & (res <= _NEWTON_NOISE)
        better = res < best[2]
        best = jax.tree.map(lambda new, old: jnp.where(better, new, old), (c, lin, res), best)
        J, r, s, z_lo, z_hi = lin
        # The first _CP_FULL steps move every unit to the set its estimate points to. If
        # that has not converged (the sets cycled), the later steps are those of a
        # feasible active-set method: the sets stay while the free units are solved, the
        # Newton step is cut where a free control reaches a bound (that unit joins it),
        # and once the free rates are solved one unit moves to the set its estimate
        # points to, the first in slot order (Murty's least-index rule).
        full = (since < _CP_FULL) | jnp.any(held)
        free = valid & ~lo & ~hi & ~fixed
        solved = jnp.max(jnp.where(free, jnp.abs(r / s), 0.0)) <= _NEWTON_NOISE
        wrong = valid & ~fixed & ((z_lo != lo) | (z_hi != hi))
        first = wrong & (jnp.cumsum(wrong) == 1) & solved
        lo, hi = jnp.where(full | first, z_lo, lo), jnp.where(full | first, z_hi, hi)
        c_new = newton(jnp.where(full, c, jnp.clip(c, 0.0, 1.0)), (J, r, s, lo, hi))
        delta = c_new - c
        reach = jnp.where(
            delta < 0.0, -c / jnp.where(delta < 0.0, delta, 1.0), (1.0 - c) / jnp.where(delta > 0.0, delta, 1.0)
        )
        out = valid & ~lo & ~hi & ~fixed & ((c_new < 0.0) | (c_new > 1.0))
        alpha = jnp.clip(jnp.min(jnp.where(out, reach, 1.0)), 0.0, 1.0)
        blocking = out & (reach <= alpha) & ~full
        c_new = jnp.where(full, c_new, jnp.clip(c + alpha * delta, 0.0, 1.0))
        c_new = jnp.where(blocking, jnp.where(delta > 0.0, 1.0, 0.0), c_new)
        lo, hi = lo | (blocking & (delta < 0.0)), hi | (blocking & (delta > 0.0))
        # Once the others are solved (or stall), of the held units whose sides are
        # inconsistent the one whose rate pushes through its surface the fastest is
        # released, or all of them if none is inconsistent.
        release = jnp.any(held) & ((res <= _NEWTON_TOL) | stalled)
        worst = jnp.argmax(jnp.where(held & (own > _NEWTON_NOISE), jnp.abs(r), -1.0))
        one = jnp.where(own[worst] > _NEWTON_NOISE, held.at[worst].set(False), jnp.zeros(K, bool))
        held = jnp.where(release, one, held)
        best = jax.tree.map(lambda b: jnp.where(release, jnp.inf, b) if b.ndim == 0 else b, best)
        prev, stalled = jnp.where(release, jnp.inf, res), stalled & ~release
        return c_new, lo, hi, held, prev, stalled, best, it + 1, jnp.where(release, 0, since + 1)

    def unsolved(carry):
        *_, held, _, stalled, best, it, _ = carry
        return (it < _CP_MAX) & (jnp.any(held) | ((best[2] > _NEWTON_TOL) & ~stalled))

    none = jnp.zeros(K, bool)
    lin0 = (jnp.zeros((K, K)), jnp.zeros(K), jnp.ones(K), none, none)
    zero = jnp.zeros((), jnp.int32)
    start = (c0, none, none, hold, jnp.inf, jnp.zeros((), bool), (c0, lin0, jnp.inf), zero, zero)
    *_, best, it, _ = jax.lax.while_loop(unsolved, step, start)
    return best + (it,)


def _descend(system, kw, c, fixed):
    """Spectral projected gradient (Birgin, Martínez and Raydan 2000) on ``q(c) =
    ½‖g(c)‖²`` over the box, the units in ``fixed`` kept where they are, from ``c``.

    For a unit both of whose sides push into its surface (``d_j < 0``), ``∂q/∂c_j =
    d_j ṗ_j / ‖∇p_j‖²`` (``∂g/∂c_j`` is the backpropagated signal at ``j`` times
    ``∇p_j``), so the conditions of the box problem are those of a minimum of ``q`` over
    the box: every descent method that converges reaches a solution, where the
    active-set iterations can cycle. The other units are ``fixed`` at their sides."""
    valid = kw["valid"]
    free = valid & ~fixed
    y, data, base, idx = kw["y"], kw["data"], kw["base"], kw["idx"]

    def q(cK):
        f = system.field(y, data, _with_controls(base, idx, valid, cK, kw.get("tie")))
        return 0.5 * jnp.dot(f, f)

    value_and_grad = jax.value_and_grad(q)

    def projected(c, step):
        return jnp.where(free, jnp.clip(c - step, 0.0, 1.0), c)

    def body(carry):
        # Each pass evaluates q and its gradient once, at its own point (one copy of them
        # in the program), and takes the spectral step length from the last pass's.
        c, c_prev, g_prev, alpha, it, _ = carry
        qc, g = value_and_grad(c)
        s, dy = c - c_prev, g - g_prev
        sy = jnp.dot(s, dy)
        spectral = jnp.where(sy > 0.0, jnp.dot(s, s) / jnp.where(sy > 0.0, sy, 1.0), 1e6 * alpha)
        first = 1.0 / jnp.maximum(jnp.max(jnp.abs(jnp.where(free, g, 0.0))), 1e-300)
        alpha = jnp.where(it == 0, first, jnp.clip(spectral, 1e-12, 1e12))
        d = projected(c, alpha * g) - c
        slope = jnp.dot(g, d)

        def shorter(ls):
            lam, _ = ls
            return 0.5 * lam, q(c + 0.5 * lam * d)

        def too_long(ls):
            lam, q_try = ls
            return (q_try > qc + 1e-4 * lam * slope) & (lam > 1e-12)

        # From λ = 2 with no value: the first pass tries the whole step.
        lam, _ = jax.lax.while_loop(too_long, shorter, (jnp.full((), 2.0), jnp.asarray(jnp.inf)))
        return c + lam * d, c, g, alpha, it + 1, jnp.max(jnp.abs(lam * d))

    def more(carry):
        *_, it, moved = carry
        return (it < _DESCENT_MAX) & (moved > 1e-13)

    start = (c, c, jnp.zeros_like(c), jnp.ones(()), jnp.zeros((), jnp.int32), jnp.ones(()))
    return jax.lax.while_loop(more, body, start)[0]


def complementarity(system, y, data, base, idx, valid, c0, hold=None, rate_floor=0.0, tie=None):
    """Solve the box complementarity problem of the units in slots ``idx`` (module
    docstring), from ``c0``.

    **Arguments:** ``system`` (a :class:`gflow.events.System`), the state ``y`` and
    ``data``, ``base`` the slopes of every unit ``(P,)`` (those in the slots are
    replaced), ``idx`` ``(K,)`` flat indices (``P`` for an empty slot), ``valid`` ``(K,)``
    bool, ``c0`` ``(K,)`` the start (each unit's present slope or control), ``hold``
    ``(K,)`` bool: units (at 0 or 1 in ``c0``) kept there while they can be;
    ``rate_floor``: rates below it count as zero (as do rates below their round-off);
    ``tie`` ``(K,)`` ints: the slot whose control each slot takes (a twin class is one
    unit with its carrier's control, :mod:`gflow.twins`; its own slot otherwise).

    **Returns:** a :class:`Decision` (a tied slot: its carrier's).

    **The method.** Semismooth Newton steps on the natural residual (an active-set
    method, :func:`_active_set`): each step fixes the units whose estimate ``z``
    (:func:`_natural_map`) lies outside ``[0, 1]`` at that bound and takes a Newton step
    on the others' rates, rows scaled by ``s`` (damped by ``_CP_DAMPING``, so that a
    control without effect keeps its value). The units in ``hold`` (those arriving at
    their surfaces) first stay at their bounds: the others are solved with them on their
    sides, then of the held units whose sides are inconsistent the one whose rate pushes
    through its surface the fastest is released and the rest solved again, until every
    unit still held is consistent on its side, where it stays (the least change: a unit
    that only grazes its surface while another arrives beside it keeps its side). After
    ``_CP_FULL`` steps without convergence (the bound set cycles, as multi-affine rates
    can make it), the steps are those of a feasible active-set method with Murty's
    least-index rule. The iterations stop when the natural residual ``max|c − Π(z)|`` is
    at ``_NEWTON_TOL``, or fails to halve once below ``_NEWTON_NOISE`` (round-off), or
    after ``_CP_MAX`` steps. If the residual is then above ``SOLVED``, the problem is
    solved as the minimum of ``‖g(c)‖²`` over the box (:func:`_descend`) and the
    active-set iterations start again from there. If that fails too, they run once more
    from ``c0``, *coupled*: with the natural map as the problem states it for every unit
    (:func:`_natural_map`), so that a unit with ``d_j > 0`` may slide where the units
    coupled to it hold it (the stability of a sliding set is that of its whole Jacobian,
    not of its diagonal: on the 20-point Scale problem at ``t = 17.65`` one of the 27
    units on their surfaces has ``d_j = +5e-12``, while with all 27 held every eigenvalue
    of their Jacobian has real part at most ``−1.0e-11``), and with rates below the
    loss's round-off counted as zero (:meth:`gflow.events.System.output_round_off`: near
    an interpolating state ``out − Y`` keeps only a few digits, and the rates ``ṗ`` no
    more). If that fails as well, the minimum of ``‖g(c)‖²`` is sought once more, from
    ``c0`` with every unit free, and the active-set iterations start from there: where
    units coupled across layers make the rates quadratic in their controls, the first
    Newton steps from ``c0`` can leave the box and fix a unit at a bound where its
    sensitivity ``d_j`` has changed sign: a non-solution, from which the first descent
    keeps that unit where it is, and the coupled round takes the same first steps
    (``tests/test_sliding.py::test_coupled_sliding_units_are_solved_from_any_start``).
    Last, they start from every unit at the bound nearest its start (0 from 1/2): the
    problem is not convex, and where these rounds fail from the box's centre a start
    from its corners has found a solution (one of ``tests/test_sliding.py``'s 300 random
    states)."""
    K = idx.shape[0]
    tie = jnp.arange(K) if tie is None else jnp.where(valid & valid[tie], tie, jnp.arange(K))
    kw = dict(y=y, data=data, base=base, idx=idx, valid=valid, tie=tie)
    c0 = jnp.where(valid, c0, 0.0)[tie]
    fixed = _riders(tie)
    hold = jnp.zeros(K, bool) if hold is None else hold & valid & ~fixed
    rho = system.output_round_off(y, data)  # the state is fixed: once for the rounds

    def round_(carry):
        # Round 0 from c0; if unsolved, round 1 from the minimum of ‖g‖² (_descend) from
        # where round 0 ended, its units at bounds with d_j ≥ 0 kept; if still unsolved,
        # round 2 from c0 again, coupled; then round 3 from the minimum of ‖g‖² from c0
        # with every unit free; last, round 4 from the bounds nearest c0.
        c_start, held, n, _ = carry
        found = _active_set(system, kw, c_start, held, rate_floor, n == 2, jnp.where(n == 2, rho, 0.0), fixed)
        c, (J, r, s, lo, hi), residual, _ = found
        again = (residual > SOLVED) & (n < _ROUNDS - 1)
        ended = jnp.where(lo, 0.0, jnp.where(hi, 1.0, jnp.clip(c, 0.0, 1.0)))
        kept = fixed | (valid & (jnp.diagonal(J) >= -_SENSITIVITY_FLOOR) & (lo | hi))
        from_end = n == 0
        c_next = jax.lax.cond(
            again & (from_end | (n == 2)),
            lambda: _descend(
                system, kw, jnp.where(from_end, ended, jnp.clip(c0, 0.0, 1.0)), jnp.where(from_end, kept, fixed)
            ),
            lambda: jnp.where(n == 3, jnp.where(c0 > 0.5, 1.0, 0.0), c0),
        )
        n_next = jnp.where(again, n + 1, _ROUNDS)
        return c_next, hold & (n_next == 2), n_next, found

    none = jnp.zeros(K, bool)
    lin0 = (jnp.zeros((K, K)), jnp.zeros(K), jnp.ones(K), none, none)
    zero = jnp.zeros((), jnp.int32)
    first = (c0, lin0, jnp.asarray(jnp.inf), zero)
    *_, (c, (J, r, s, lo, hi), residual, it) = jax.lax.while_loop(
        lambda carry: carry[2] < _ROUNDS, round_, (c0, hold, zero, first)
    )
    d = jnp.diagonal(J)
    a_plus, a_minus = r + (1.0 - c) * d, r - c * d
    # Tied slots take their carriers' values.
    c, lo, hi, a_plus, a_minus = (a[tie] for a in (c, lo, hi, a_plus, a_minus))
    # A free unit within SOLVED of a bound whose rate there is consistent (zero within
    # _SIGN_TOL of its one-sided rates) takes that side (σ'(0) = 0: a unit whose field
    # on its inactive side is tangent is inactive); so does one whose control sits
    # exactly at a bound.
    free = valid & ~lo & ~hi & ~fixed
    tol = _SIGN_TOL * (jnp.abs(a_plus) + jnp.abs(a_minus))
    snap_lo = free & (c < SOLVED) & (a_minus <= tol)
    snap_hi = free & ~snap_lo & (c > 1.0 - SOLVED) & (a_plus >= -tol)
    snap_lo, snap_hi = snap_lo[tie], snap_hi[tie]
    c = jnp.where(lo, 0.0, jnp.where(hi, 1.0, c))  # the best point can be one step short of its bounds

    def snapped():
        # The units that stay, solved again with the snapped ones at their sides (quasi-Newton
        # iterations from the solution's Jacobian, which the snap moves by at most SOLVED
        # in its controls); kept only if they converge and their controls stay inside (a
        # snapped control can matter: strongly coupled units).
        lo_s, hi_s = lo | snap_lo, hi | snap_hi
        c_s = jnp.where(lo_s, 0.0, jnp.where(hi_s, 1.0, c))
        slide = valid & ~lo_s & ~hi_s
        others = _with_controls(base, idx, valid & ~slide, c_s)
        idx_s = jnp.where(slide, idx, base.shape[0])  # empty slots point past the units
        residual = functools.partial(
            _rates_residual, system, y=y, data=data, base=others, idx=idx_s, valid=slide, tie=tie
        )
        inverse, scale = _damped_inverse(jnp.where(slide[:, None] & slide[None, :], J, jnp.eye(K)), slide)
        c_new, res = _chord(residual, inverse, scale, c_s)
        c_s = jnp.where(slide, c_new[tie], c_s)
        solved = res <= _NEWTON_NOISE * scale
        inside = solved & jnp.all(jnp.where(slide, (c_s > 0.0) & (c_s < 1.0), True))
        return jax.tree.map(lambda new, old: jnp.where(inside, new, old), (c_s, lo_s, hi_s), (c, lo, hi))

    c, lo, hi = jax.lax.cond(jnp.any(snap_lo | snap_hi), snapped, lambda: (c, lo, hi))
    on_bound = valid & ~lo & ~hi & ((c <= 0.0) | (c >= 1.0))  # a control exactly at a bound: that side
    lo, hi = lo | (on_bound & (c <= 0.0)), hi | (on_bound & (c >= 1.0))
    return Decision(
        control=c, slide=valid & ~lo & ~hi, up=hi, a_plus=a_plus, a_minus=a_minus, residual=residual, iterations=it
    )
