"""Kinks of the gradient field: activation modes, one-sided fields, Filippov sliding.

Every hidden pre-activation ``p_k`` (flat index ``k``, see :mod:`gflow.networks`) is in
one of three *modes*: ``INACTIVE`` (``σ'(p) = 0``, the side ``p ≤ 0``), ``ACTIVE``
(``σ'(p) = 1``, the side ``p > 0``) or ``SLIDING`` (held on the surface ``p = 0`` by the
Filippov solution). A mode pattern fixes the *slope* of every hidden unit: 0, 1, or for
a sliding unit the equivalent control ``c ∈ [0, 1]`` that keeps ``ṗ = 0``. With fixed
slopes the loss is a polynomial in θ and the field ``−∇L`` is smooth, so the integrator
works region by region and this module decides, at each zero crossing, what happens
next (SPEC §2):

- ``a₊``, ``a₋``: ``ṗ_k`` under the field with ``k``'s slope set to 1 and to 0 (every other
  unit as it is). ``ṗ_k`` is affine in that slope, so the Filippov field on the surface is
  ``c·a₊ + (1−c)·a₋`` for slope ``c``.
- Depth 2 (:meth:`System.handle`): arriving from the active side (``p`` fell to
  0), the inactive field pushes back (``a₋ > 0``) → sliding starts with ``c = a₋/(a₋ −
  a₊)``; the active field clearly pushes away (``a₊ > 0``, a graze) → a touch, it stays
  active (reported as repelling if also ``a₋ < 0``); otherwise → transversal crossing, it
  becomes inactive (``a₋ ≈ 0`` included: by ``σ'(0) = 0`` a unit whose inactive field is
  tangent, such as a dying neuron, is inactive). Arrivals from the inactive side mirror
  this. A sliding unit leaves when its control reaches 0 (to the inactive side) or 1 (to
  the active side).
- Deeper networks (:mod:`gflow.kinks`): every unit on its surface at the event
  (those arriving, those whose control reached 0 or 1, every other sliding unit) is
  decided at once by the box complementarity problem of :mod:`gflow.sliding`, whose
  solution says which units slide and to which side the others go; for a single unit it
  gives the decisions above. A sliding unit's guard also fires when it drifts off its
  surface (:func:`gflow.flow._held_guards`). After the decision, sliding units more than
  half a round-off band off their surfaces are put on them (:func:`gflow.kinks.onto_surfaces`).
- A neuron inactive on every point gets zero gradient on its incoming and outgoing
  weights, exactly (its slopes are 0). In the first layer its pre-activations are then
  constant and it never fires again (dead for good). In deeper layers its weights are
  frozen too, but its pre-activations still move with the layers below it, and the flow
  may revive it: the engine follows that.
- Bias-free degeneracy: when a point has no active unit left in a hidden layer, nor one
  held on its surface, every pre-activation above it at that point is 0 and stays 0
  while that lasts, and the one-sided fields do not decide its side.
  By ``σ'(0) = 0`` such units are *cut*: inactive, recorded as :attr:`Kind.CUT`, and a
  unit held on its surface whose control then acts on nothing (*stranded*) leaves by the
  sign of its own rate (:meth:`System.cut`, :func:`gflow.kinks.decide`). At the event where
  the last active unit ``j`` of a layer at a point reaches its surface, the units above
  it there reach theirs at the same instant, their pre-activations proportional to
  ``p_j``: they follow ``j`` (*slaved*). ``j``'s active-side rate is taken with them in
  the modes they had (that side's field backpropagates through them); if ``j`` stays,
  they keep those modes, if it leaves, they are cut. Conversely, where a unit arriving
  from its inactive side is the first that can carry its point again, the cut units
  above it there take the sides their pre-activations (multiples of its output) have on
  its active side (*revived*), and its active-side rate is taken with them so.

Signs are decided with a relative tolerance, so round-off at the surface never flips a
decision back and forth, and the integrator never looks at the sign of ``p`` to pick a
side: the mode is state, and an event is a sign change of the mode's own *guard*
(``p`` if active, ``−p`` if inactive, ``min(c, 1 − c)`` if sliding) from positive to
non-positive inside a step. The one exception follows an event in a deep network: units
whose pre-activations the new modes moved beyond their round-off band on the other side
of their surfaces (their guards already negative, so they would never change sign) take
the mode of their side at once (:func:`gflow.kinks.settle`).
"""

from __future__ import annotations

import enum
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .networks import SMALL_PRODUCT, _times_transpose, forward, layer_blocks, per_unit, stacked_blocks
from .sliding import (
    _SIGN_TOL,
    _damped_inverse,
    _damping,
    _newton_controls,
    _residual_and_jacobian,
    _solve_small,
    _with_controls,
)

__all__ = ["INACTIVE", "ACTIVE", "SLIDING", "Kind"]

INACTIVE, ACTIVE, SLIDING = 0, 1, 2


def _traced_once(*static_argnums):
    """Jit a :class:`System` method per instance (``static_argnums``: positions after
    ``self``), called with positional arguments only. One compiled program calls the
    sliding controls from many places (every stage, guard sample and event);
    jitted, each distinct argument signature is traced and batched once instead of once
    per call site, and XLA inlines the calls as before: the same results bit for bit.
    With :func:`gflow.flow.compiled` starting lanes through one jitted function too, a
    depth-3 program (3-3-3-2, 4 points) traced in 6.6 s instead of 24.5 s and its first
    call took 48 s instead of 61 s; depth 2 (authors' setting) 13 s instead of 17 s."""

    def wrap(method):
        attribute = "_jit_" + method.__name__

        @functools.wraps(method)
        def call(self, *args):
            fn = self.__dict__.get(attribute)
            if fn is None:
                fn = self.__dict__[attribute] = jax.jit(functools.partial(method, self), static_argnums=static_argnums)
            return fn(*args)

        return call

    return wrap


class Kind(enum.IntEnum):
    """What happened at a recorded event."""

    CROSS = 0
    """Transversal crossing: the unit changes side (direction ±1)."""
    SLIDE_START = 1
    """Both one-sided fields push into the surface: the unit starts sliding (direction 0)."""
    SLIDE_END = 2
    """The equivalent control reached 0 or 1: the unit leaves the surface (direction ±1).
    Also at ``t = 0`` for a unit given as sliding (``modes=``) whose control lies outside
    [0, 1]."""
    TOUCH = 3
    """The unit reached the surface tangentially and stays on its side (direction 0)."""
    REPEL = 4
    """Both one-sided fields push away from the surface; the unit stays on its side
    (direction 0). Only possible when starting on the surface."""
    CUT = 5
    """The unit's point has no activation left in the layer below (none of its units
    there is active or held on its surface), so the unit's pre-activation is identically
    0 and its rate too, and the flow does not decide its side: by ``σ'(0) = 0`` it is
    inactive (direction −1 if it was not, else 0). A bias-free network meets this where
    the last active unit of a layer at a point leaves its surface to the inactive side,
    at once or at the end of a slide: every unit above it at that point reached its own
    surface with it (:meth:`System.cut`, :func:`gflow.kinks.decide`)."""


def _noise(p, rtol, atol):
    """Band around a surface inside which a unit's guard cannot be told from zero: the
    integration error of one step, ``10·(atol + rtol·max(1, max|p|))``, and never less
    than round-off (``_ROUNDOFF·max(1, max|p|)``; it binds only below ``rtol ≈ 1e-15``,
    which ``motion_tol`` reaches)."""
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(p), axis=-1, initial=0.0))
    return jnp.maximum(10.0 * (atol + rtol * scale), _ROUNDOFF * scale)


# The least round-off band, relative to max(1, max|p|): 64 ulps. The 20-point Scale problem
# (depth 10, width 20) at t = 17.5 computes its pre-activations 4.0e-16 off their values in
# 64-bit-mantissa arithmetic, at max|p| = 1.49: 1.2 ulps.
_ROUNDOFF = 64 * float(np.finfo(np.float64).eps)


def slot_sizes(K):
    """Slot counts of the sliding solves for at most ``K`` units sliding at once: 1 (a
    cheaper solve of its own in deep networks) and ``K``. Each count is a branch of every
    sliding solve, compiled in every place that solves (depth 3, width 10, 16 points:
    XLA compiled the program in 35.5 s with the counts 1, 4 and 10 and in 22.0 s with 1
    and 10, idle machine); the work of the ``K`` branch follows the units sliding, not
    ``K`` (the Jacobian's columns, :func:`_over_used_slots`)."""
    return sorted({1, K})


class _Field:
    """The smooth pieces of the gradient field: with every unit's slope fixed, the loss,
    the field ``−∇L``, the pre-activations and their rates along it, and the rates'
    Jacobian in the slopes."""

    def __init__(self, unravel, loss, n, hidden_widths, max_sliding, small=SMALL_PRODUCT):
        from .losses import LOSSES, objective
        from .networks import index_table, preactivations

        self.unravel = unravel
        self.small = small  # products written out up to it (networks.written_out_below)
        self.objective = objective(loss, small)
        self.loss_fn = LOSSES[loss]
        self.loss_name = loss
        self.n = n
        self.hidden_widths = tuple(hidden_widths)
        self.P = n * sum(hidden_widths)
        self.K = max_sliding
        self._preactivations = preactivations
        # Per flat index (and the sentinel P): its point, and its position in that point's
        # vector of H = d_1 + … + d_{k-1} pre-activations (layer-major, then neuron).
        layer, neuron, point = index_table(n, self.hidden_widths)
        position = np.concatenate([[0], np.cumsum(self.hidden_widths)[:-1]])[layer] + neuron
        self._point = np.append(point, 0).astype(np.int32)
        self._position = np.append(position, 0).astype(np.int32)
        by_point = np.zeros((n, sum(self.hidden_widths)), np.int32)
        by_point[point, position] = np.arange(self.P)
        self._by_point = by_point  # [point, position] -> flat index

    def _slope_list(self, slopes):
        from .networks import unflatten_preactivations

        return unflatten_preactivations(slopes, self.n, self.hidden_widths)

    def preacts(self, y, data, slopes=None, held=False):
        """All pre-activations, ``(P,)``; ``held``: units held on their surfaces output
        exactly 0 to the layers above (:func:`gflow.networks.forward`)."""
        X = data[0]
        s = None if slopes is None else self._slope_list(slopes)
        return self._preactivations(self.unravel(y), X, s, held, self.small)

    def loss(self, y, data):
        X, Y, wd = data
        return self.objective(self.unravel(y), X, Y, wd, None)

    def field(self, y, data, slopes):
        """``−∇L`` with the given slopes, flat. Shape ``(D,)``."""
        X, Y, wd = data
        params = self.unravel(y)
        slopes = self._slope_list(slopes)
        g = jax.grad(lambda params: self.loss_fn(forward(params, X, slopes, small=self.small)[0], Y))(params)
        # Weight decay's gradient λθ written out: autodiff of (λ/2)‖θ‖² gives the same
        # numbers, (λ/2)·(2θ), in a square, a sum and their transposes per layer.
        return -self._flat([G + wd * W for G, W in zip(g, params)], y)

    def _flat_grad(self, fn, y):
        """The gradient of ``fn`` (a function of the weight list) at ``y``'s weights, flat
        like ``y``: the same numbers as differentiating through ``y``'s slices, in fewer
        operations (each slice's transpose is a padded copy)."""
        return self._flat(jax.grad(fn)(self.unravel(y)), y)

    @staticmethod
    def _flat(arrays, y):
        """Weight-shaped ``arrays`` as one vector like ``y`` (0 past the weights: the
        energy integral a state ends with)."""
        flat = jnp.concatenate([a.reshape(-1) for a in arrays])
        return jnp.concatenate([flat, jnp.zeros(y.shape[0] - flat.shape[0], flat.dtype)])

    def output_round_off(self, y, data):
        """The field's relative round-off from its loss, beyond that of the passes: the
        regression losses' gradient is ``out − Y``, whose round-off is that of ``out`` and
        ``Y``, ``ε·‖|out| + |Y|‖``, however small the difference: relative to it, near an
        interpolating state (loss 1e-19: ``ρ`` ≈ 1e-6), far more than ``ε``. 0 for the
        classification losses (no such difference)."""
        from .losses import CLASSIFICATION

        if self.loss_name in CLASSIFICATION:
            return jnp.zeros(())
        X, Y, _ = data
        out = forward(self.unravel(y), jnp.asarray(X), small=self.small)[0]
        Y = jnp.reshape(jnp.asarray(Y), out.shape)
        gap = jnp.linalg.norm(out - Y)
        size = jnp.finfo(out.dtype).eps * jnp.linalg.norm(jnp.abs(out) + jnp.abs(Y))
        return jnp.where(gap > size, size / jnp.where(gap > size, gap, 1.0), 1.0)

    def field_and_rates(self, y, data, slopes):
        """The field and ``ṗ`` (all pre-activations' rates of change along it)."""
        f = self.field(y, data, slopes)
        _, pdot = jax.jvp(lambda y: self.preacts(y, data, slopes), (y,), (f,))
        return f, pdot

    def _at_point(self, params, x, sigma):
        """Output ``(d_k,)`` and pre-activations ``(H,)`` at one input ``x`` with that
        point's slopes ``sigma`` ``(H,)``."""
        splits = np.cumsum(self.hidden_widths)[:-1]
        out, pre = forward(params, x[None], [s[None] for s in jnp.split(sigma, splits)], small=self.small)
        return out[0], jnp.concatenate([p[0] for p in pre])

    def rates_jacobian(self, y, data, slopes, field, idx, diagonal=False, norms=False):
        """``∂ṗ_a/∂s_b`` for the units in slots ``idx`` (flat indices, ``P`` for an empty
        slot), ``(K, K)``, at slopes ``slopes`` whose field is ``field``; with
        ``diagonal``, only ``∂ṗ_a/∂s_a``, ``(K,)``; with ``norms``, also ``‖∇p_a‖``,
        ``(K,)``.

        A slope acts at its own point only, and every loss is a sum over points, so with
        ``ℓ_i`` point ``i``'s term, ``s_b`` moves the field by ``v_b = −∂_{s_b}∇ℓ_{i(b)}``
        and ``ṗ_a = ∇p_a · f`` also through ``∇p_a`` when ``a`` is at the same point:
        ``J[a, b] = ∇p_a · v_b + [i(a) = i(b)] (∂_{s_b}∇p_a) · f``. Each ``v_b``, ``∇p_a``
        and ``∂_{s_b}∇p_a`` costs one pass over one point, where differentiating the whole
        field costs passes over all ``n`` (:func:`_rates_residual` under ``jacfwd``)."""
        X, Y = jnp.asarray(data[0]), jnp.asarray(data[1])
        out = jax.lax.stop_gradient(forward(self.unravel(y), X, self._slope_list(slopes), small=self.small)[0])
        sigmas = jnp.append(slopes, 0.0)[self._by_point]  # [point, position]
        point, position = jnp.asarray(self._point)[idx], jnp.asarray(self._position)[idx]

        def column(i, u):
            def pieces(sigma):
                # Point i's loss term: the other rows of the output are constants.
                term = lambda params: self.loss_fn(out.at[i].set(self._at_point(params, X[i], sigma)[0]), Y)  # noqa: E731
                _, pdot = jax.jvp(lambda y: self._at_point(self.unravel(y), X[i], sigma)[1], (y,), (field,))
                return -self._flat_grad(term, y), pdot

            e = jnp.zeros_like(sigmas[i]).at[u].set(1.0)
            return jax.jvp(pieces, (sigmas[i],), (e,))[1]

        def row(i, u):
            return self._flat_grad(lambda params: self._at_point(params, X[i], sigmas[i])[1][u], y)

        def chunk(point, position):
            return (*jax.vmap(column)(point, position), jax.vmap(row)(point, position))

        V, Q, R = _over_used_slots(chunk, idx < self.P, point, position)  # (K, D), (K, H), (K, D)
        if diagonal:
            return jnp.sum(R * V, axis=1) + jnp.take_along_axis(Q, position[:, None], axis=1)[:, 0]
        J = R @ V.T + jnp.where(point[:, None] == point[None, :], Q[:, position].T, 0.0)
        return (J, jnp.linalg.norm(R, axis=1)) if norms else J

    @staticmethod
    def base_slopes(mode, control):
        return jnp.where(mode == ACTIVE, 1.0, jnp.where(mode == SLIDING, control, 0.0))


class _Controls:
    """The sliding units' equivalent controls: the slopes that hold every sliding unit's
    rate at 0 (module docstring), by the cheapest exact route for the number sliding."""

    def sliding_slots(self, mode, slots=None, tie=None, X=None):
        """The sliding units' slots ``(idx, valid, tie)``: ``tie`` gives each slot the
        slot whose control it takes (a twin class's carrier, :func:`gflow.twins.ties`),
        computed here unless given (a chord's, :meth:`chord`: the modes are those of the
        step, and a carrier's slot precedes its passengers', so the first slots' map is
        the same for any slot count). ``X``: the data (twins of the first layer)."""
        from . import twins

        on = mode == SLIDING
        idx = jnp.nonzero(on, size=slots or self.K, fill_value=self.P)[0]
        valid = idx < self.P
        if tie is not None:
            return idx, valid, tie[: idx.shape[0]]
        return idx, valid, twins.ties(self, idx, valid, twins.shared(self.n, self.hidden_widths, mode, X), on)

    @_traced_once(4)
    def equivalent_control(self, y, data, mode, warm, slots=None, chord=None):
        """Slopes with every sliding unit's control solved so that all sliding ``ṗ = 0``.

        Returns ``(slopes, control)``, both ``(P,)``; ``control`` holds the solved values
        at sliding units and ``warm`` elsewhere. The rates are multilinear in the controls:
        for depth 2 they are affine and solved in closed form from one backward pass
        (:meth:`_control_depth2`); deeper networks use chord and Newton iterations from
        ``warm`` (:func:`_newton_controls`), with the Jacobian of ``chord`` if given
        (:meth:`chord`). ``slots`` (default ``K``) is how many sliding units the solve
        makes room for: the cost grows with it, and the result is the same for any
        ``slots`` not below the number of sliding units.
        """
        base = self.base_slopes(mode, jnp.zeros_like(warm))
        if len(self.hidden_widths) == 1:
            idx, valid, _ = self.sliding_slots(mode, slots)
            c = self._control_depth2(y, data, base, idx, valid)
            return _with_controls(base, idx, valid, c), _with_controls(warm, idx, valid, c)
        idx, valid, tie = self.sliding_slots(mode, slots, None if chord is None else chord[2], data[0])
        c0 = self._newton_start(warm, idx, valid)[tie]
        if chord is not None:
            chord = (chord[0][: idx.shape[0], : idx.shape[0]], chord[1])
        c = _newton_controls(self, y, data, c0, base, idx, valid, tie, chord)
        return _with_controls(base, idx, valid, c, tie), _with_controls(warm, idx, valid, c, tie)

    @staticmethod
    def _newton_start(warm, idx, valid):
        """The start of the iterations: ``warm`` at the sliding slots."""
        return jnp.where(valid, jnp.append(warm, 0.5)[idx], 0.0)

    @_traced_once()
    def chord(self, y, data, mode, control, n_sliding):
        """The Jacobian of the sliding units' rates in their controls at ``(y, control)``,
        as its damped inverse ``(K, K)`` and scale, for the solve that :meth:`_controls`
        picks for ``n_sliding`` (identity rows past its slot count), and the slots' map
        to their twin classes' carriers (``(K,)``, :meth:`sliding_slots`). Within one step the
        modes are fixed and the states are close: computed once at the step's start, it
        serves every stage and guard of the step as the chord of their iterations, each of
        which then costs a few rate evaluations instead of a new Jacobian. Deep networks
        only (``None`` for depth 2, whose controls are solved in closed form)."""
        if len(self.hidden_widths) == 1:
            return None
        K = self.K

        def at(size):
            idx, valid, tie = self.sliding_slots(mode, size, None, data[0])
            base = self.base_slopes(mode, jnp.zeros_like(control))
            c0 = self._newton_start(control, idx, valid)[tie]
            J, _ = _residual_and_jacobian(self, c0, y=y, data=data, base=base, idx=idx, valid=valid, tie=tie)
            inverse, scale = _damped_inverse(J, valid)
            return jnp.eye(K).at[:size, :size].set(inverse), scale, jnp.arange(K).at[:size].set(tie)

        sizes = slot_sizes(self.K)
        none = lambda: (jnp.eye(K), jnp.ones(()), jnp.arange(K))  # noqa: E731  (one unit: no twins)
        routes = [none] + [functools.partial(at, size) for size in sizes[1:]]
        if jnp.issubdtype(jnp.result_type(n_sliding), jnp.bool_):
            index = jnp.where(n_sliding, len(routes) - 1, 0)
        else:
            index = jnp.where(n_sliding > 1, jnp.searchsorted(jnp.array(sizes[1:]), n_sliding) + 1, 0)
        return jax.lax.switch(jnp.minimum(index, len(routes) - 1), routes)

    @_traced_once()
    def _controls(self, y, data, mode, control, n_sliding, chord=None):
        """``(slopes, control)`` for the current modes by the cheapest exact route.

        ``n_sliding`` is batch-wide: the most units sliding in any member (a bool means
        "some, any number"), so that the choice stays a real branch under vmap. Nothing
        slides: the mode slopes. Otherwise :meth:`equivalent_control` with room for 1 or
        ``K`` sliding units, the fewest that fit (:func:`slot_sizes`); in deeper networks
        one sliding unit takes :func:`_single_control`. Depth 2 with at
        most ``_BLOCK_POINTS`` points: :meth:`_controls_depth2_blocks` whenever some unit
        slides (for tiny problems written out scalar by scalar,
        :meth:`_controls_depth2_entries`). ``chord``: see :meth:`chord`.
        """
        if len(self.hidden_widths) == 1 and self.n <= _BLOCK_POINTS:
            some = n_sliding if jnp.issubdtype(jnp.result_type(n_sliding), jnp.bool_) else n_sliding > 0
            tiny = self.n * y.shape[0] <= _ENTRIES_LIMIT
            blocks = self._controls_depth2_entries if tiny else self._controls_depth2_blocks
            return jax.lax.cond(
                some,
                lambda: blocks(y, data, mode, control),
                lambda: (self.base_slopes(mode, control), control),
            )
        sizes = slot_sizes(self.K)
        routes = [lambda: (self.base_slopes(mode, control), control)]
        for size in sizes:
            if size == 1 and len(self.hidden_widths) > 1:
                routes.append(lambda: _single_control(self, y, data, mode, control))
            else:
                routes.append(functools.partial(self.equivalent_control, y, data, mode, control, size, chord))
        if jnp.issubdtype(jnp.result_type(n_sliding), jnp.bool_):
            index = jnp.where(n_sliding, len(sizes), 0)
        else:
            index = jnp.where(n_sliding > 0, 1 + jnp.searchsorted(jnp.array(sizes), n_sliding), 0)
        return jax.lax.switch(jnp.minimum(index, len(sizes)), routes)

    def slopes(self, y, data, mode, control, n_sliding, chord=None):
        """Slopes for the current modes; solves the sliding controls only when
        ``n_sliding > 0`` (see :meth:`_controls`)."""
        return self._controls(y, data, mode, control, n_sliding, chord)[0]


def _single_control(system, y, data, mode, warm):
    """:meth:`System.equivalent_control` when at most one unit slides (deeper networks), at the
    cost of three field evaluations rather than three Jacobians. On its surface its rate
    is affine in its own control ``c`` (the rate's gradient depends only on the slopes
    of lower layers, and the unit's output ``c·p`` is 0): ``r(c) ≈ a₋ + c·(a₊ − a₋)``
    from the two one-sided rates. The damped Newton step of :meth:`System.equivalent_control`
    (:func:`_damped_inverse`: damping ``(1e-7·|J|)²``, ``|J|`` floored) is run three
    times on this affine model, then once more on the true rate at the control found:
    a unit held within the event tolerance of its surface (``p`` ~ 1e-11, not 0) feeds
    ``c·p`` to the layers above, which makes ``r`` quadratic in ``c`` with a coefficient
    of order ``p``. Without that step the rate left over is of order ``p`` and can feed
    ``p`` itself: in a thm4 run (depth 3, width 4, ``λ = 1e-2``) a sliding unit's ``p``
    grew from 1e-11 to 2e-3 while it slid. With it both routes give the same control
    (``tests/test_deep.py::test_single_sliding_control_zeroes_the_rate_off_the_surface``)."""
    k = jnp.argmax(mode == SLIDING)
    sliding = mode[k] == SLIDING
    base = system.base_slopes(mode, jnp.zeros_like(warm))

    def rate(value):
        _, pdot = system.field_and_rates(y, data, base.at[k].set(value))
        return pdot[k]

    def evaluate(i, carry):
        # Pass 0: the rate at slope 1, pass 1: at 0, pass 2: at the affine model's
        # control, and the step on the true rate from there. One rate evaluation per
        # pass: one copy of the network's passes in the compiled program.
        a_plus, a_minus, _ = carry
        J = a_plus - a_minus
        mu, _ = _damping(jnp.abs(J))
        model = warm[k]
        for _ in range(3):
            model = model - J * (a_minus + model * J) / (J * J + mu)
        r = rate(jnp.select([i == 0, i == 1], [1.0, 0.0], model))
        return jnp.where(i == 0, r, a_plus), jnp.where(i == 1, r, a_minus), model - J * r / (J * J + mu)

    zero = jnp.zeros_like(warm[k])
    c = jax.lax.fori_loop(0, 3, evaluate, (zero, zero, zero))[2]
    c = jnp.where(sliding, c, warm[k])
    return jnp.where(sliding, base.at[k].set(c), base), warm.at[k].set(c)


class _Depth2Controls:
    """Depth 2: the sliding controls in closed form, the rates being affine in them
    (:meth:`_depth2_system`)."""

    def _depth2_system(self, y, data, base):
        """Depth 2: with ``β = ∂ℓ/∂H`` (``H`` the hidden activations, ``(n, d_1)``) and the
        Gram matrix ``G = X Xᵀ``, ``ṗ_{j,i'} = −Σ_i s_{j,i} β_{i,j} G_{i,i'} − λ p_{j,i'}``,
        and ``β`` does not depend on the slopes of units at ``p = 0``: the sliding
        controls solve a small linear system, one block per neuron. Returns ``β``
        ``[point, neuron]``, ``G`` and ``ṗ`` with every sliding slope 0 (``base``)
        ``[neuron, point]``."""
        X, Y, wd = data
        W1, W2 = self.unravel(y)
        S = base.reshape(self.hidden_widths[0], self.n)  # [neuron, point]
        times = functools.partial(_times_transpose, small=self.small)
        pre = times(X, W1)  # [point, neuron]
        beta = jax.grad(lambda H: self.loss_fn(times(H, W2), Y))(S.T * pre)
        gram = times(X, X)
        return beta, gram, -times(S * beta.T, gram) - wd * pre.T

    def _control_depth2(self, y, data, base, idx, valid):
        """:meth:`_depth2_system` for the sliding units gathered in slots ``idx``."""
        n, d1 = self.n, self.hidden_widths[0]
        beta, gram, pdot0 = self._depth2_system(y, data, base)
        j, i = idx // n, idx % n
        A = (
            (j[:, None] == j[None, :])
            * beta[i[None, :], jnp.minimum(j, d1 - 1)[:, None]]
            * gram[i[None, :], i[:, None]]
        )
        both = valid[:, None] & valid[None, :]
        A = jnp.where(both, A, jnp.eye(idx.shape[0]))
        rhs = jnp.where(valid, jnp.append(pdot0.reshape(-1), 0.0)[idx], 0.0)
        return _solve_small(A, rhs)

    def _controls_depth2_blocks(self, y, data, mode, warm):
        """Depth 2 with few points: :meth:`_depth2_system` as one ``n × n`` block per neuron
        (rows and columns of units that do not slide replaced by the identity), solved for
        every neuron at once. Nothing is gathered and nothing branches, so under ``vmap``
        it fuses with the field around it; with nothing sliding it returns the mode
        slopes. Returns ``(slopes, control)`` as :meth:`equivalent_control`."""
        sliding = (mode == SLIDING).reshape(self.hidden_widths[0], self.n)  # [neuron, point]
        base = self.base_slopes(mode, jnp.zeros_like(warm))
        beta, gram, pdot0 = self._depth2_system(y, data, base)
        # Block j: B[r, q] = β[q, j] G[q, r] for sliding points r, q of neuron j.
        both = sliding[:, :, None] & sliding[:, None, :]
        B = jnp.where(both, beta.T[:, None, :] * gram[None, :, :], jnp.eye(self.n))
        c = jnp.where(sliding, _solve_small(B, jnp.where(sliding, pdot0, 0.0)), 0.0)
        return base + c.reshape(-1), jnp.where(sliding.reshape(-1), c.reshape(-1), warm)

    def _controls_depth2_entries(self, y, data, mode, warm):
        """:meth:`_controls_depth2_blocks` written out scalar by scalar, for tiny problems
        (``n·D ≤ _ENTRIES_LIMIT``, such as the paper's 2-2-2 network on two points). Under
        ``vmap`` on a CPU every operation is then one vector operation over the batch
        instead of a product or reduction of ``(B, 2, 2)`` arrays: on the authors' 288
        seeds, where some lane slides in a third of the iterations, the batch takes 40 ms
        instead of 45 (2 devices; 288 random two-point sets: 47 instead of 64). Larger
        problems keep the array form: unrolled, their compile time grows several-fold for
        no gain at run time (4 points, 2-4-2: 46 s against 14 s to compile)."""
        X, Y, wd = data
        n = self.n
        (d1, d0), (d2, _) = (W.shape for W in self.unravel(y))
        entries = [y[k] for k in range(y.shape[0])]
        W1 = [entries[j * d0 : (j + 1) * d0] for j in range(d1)]  # rows of W_1, then of W_2
        W2 = [entries[d1 * d0 + k * d1 : d1 * d0 + (k + 1) * d1] for k in range(d2)]
        base = self.base_slopes(mode, jnp.zeros_like(warm))
        sliding = mode == SLIDING

        def total(terms):
            return functools.reduce(jnp.add, terms)

        pre = [[total([W1[j][c] * X[i, c] for c in range(d0)]) for j in range(d1)] for i in range(n)]

        def loss_of(H):
            out = [[total([row[j] * H[i][j] for j in range(d1)]) for row in W2] for i in range(n)]
            return self.loss_fn(jnp.stack([jnp.stack(o) for o in out]), Y)

        beta = jax.grad(loss_of)([[base[j * n + i] * pre[i][j] for j in range(d1)] for i in range(n)])
        gram = [[total([X[i, c] * X[r, c] for c in range(d0)]) for r in range(n)] for i in range(n)]
        slopes, control = [], []
        for j in range(d1):
            sl = [sliding[j * n + r] for r in range(n)]
            pdot0 = [
                -total([base[j * n + i] * beta[i][j] * gram[i][r] for i in range(n)]) - wd * pre[r][j] for r in range(n)
            ]
            B = [[jnp.where(sl[r] & sl[q], beta[q][j] * gram[q][r], float(r == q)) for q in range(n)] for r in range(n)]
            c = _solve_entries(B, [jnp.where(sl[r], pdot0[r], 0.0) for r in range(n)])
            for r in range(n):
                c_r = jnp.where(sl[r], c[r], 0.0)
                slopes.append(base[j * n + r] + c_r)
                control.append(jnp.where(sl[r], c_r, warm[j * n + r]))
        return jnp.stack(slopes), jnp.stack(control)


class _Guards:
    """What the event guards watch: each unit's guard, and the units the data cannot
    reach (dead first-layer neurons; *cut*, *stranded*, *revived* and *vanished* units of the
    bias-free degeneracy, module docstring)."""

    @_traced_once()
    def guards(self, y, data, mode, control, n_sliding, chord=None):
        """The event guard of every unit (positive while its mode is valid), ``(P,)``,
        the sliding controls at ``y`` (``(P,)``, as :meth:`equivalent_control`) and the
        pre-activations ``(P,)`` (a sliding unit's own is its distance from its surface:
        :func:`gflow.flow._held_guards`)."""
        # Exactly 0 above held units: their round-off never fakes a crossing above them.
        p = self.preacts(y, data, self.base_slopes(mode, control), held=True)
        g = jnp.where(mode == ACTIVE, p, -p)
        # A first-layer neuron inactive at every point gets no gradient from the loss, so
        # its weights only shrink (weight decay) and its p = w·x keep their signs: it is
        # dead for good. Its guards never fire (1 keeps the round-off band unchanged).
        # Watched, they did fire: once weight decay takes the weights below atol, the
        # solver no longer resolves them and p changes sign by noise (depth 2, λ = 0.5, a
        # dead neuron "revived" at t ≈ 56).
        g = jnp.where(self.dead_first_layer(mode), 1.0, g)
        _, c = self._controls(y, data, mode, control, n_sliding, chord)
        return jnp.where(mode == SLIDING, jnp.minimum(c, 1.0 - c), g), c, p

    def dead_first_layer(self, mode):
        """``(P,)`` bool: the units of first-layer neurons inactive at every point."""
        n, d = self.n, self.hidden_widths[0]
        dead = jnp.all(mode[: d * n].reshape(d, n) == INACTIVE, axis=1)
        return jnp.zeros(self.P, bool).at[: d * n].set(jnp.repeat(dead, n))

    def cut(self, mode):
        """Units whose point has no activation in the layer below (*cut*), and units held
        on their surfaces whose control acts on nothing (*stranded*). Two ``(P,)`` bool
        masks.

        Bias-free: a point none of whose units in a hidden layer is active or held on its
        surface has zero pre-activations in every unit of the next layer, and they stay
        zero while that lasts; by ``σ'(0) = 0`` they are inactive. Cut units count as
        inactive for the layers above them (so a cut spreads upwards). A held unit outputs
        0 as well, but the units above it keep their modes: on its active side they carry
        its output, so its slope acts through them (the Filippov field mixes both sides).
        It is stranded when it has no active unit beside it in its layer at its point and
        none of the units it feeds there is active or held: then its slope acts on
        nothing. The first hidden layer is never cut, the last never stranded."""
        cut, live = self._columns(mode, lambda m: m != INACTIVE)
        n, widths = self.n, self.hidden_widths
        beside = jnp.any(stacked_blocks((mode == ACTIVE) & ~cut, n, widths, False), axis=1)  # [layer, point]
        strands = jnp.concatenate([~beside[:-1] & ~live[1:], jnp.zeros((1, n), bool)])
        return cut, per_unit(strands, n, widths)

    def revived(self, y, mode, pending):
        """Cut units that pending units arriving from their inactive sides would reconnect,
        and the modes they take on those units' active side: ``(revived, modes)``, both
        ``(P,)``. Bias-free: where an arriving unit is the only one of its layer at its point
        that can carry anything, every pre-activation above it there is a fixed multiple of
        its output: with it at ``h = 1`` and nothing else there, their signs are the sides
        those units go to as soon as it is active, layer by layer up to where a layer has
        none on its active side (the point is cut above it). Its active-side field
        backpropagates through them in those modes (a depth-4 kink at which the arriving
        unit's rates were +0.128 inactive and −0.83 active with them, +0.128 on both sides
        with them cut: ``σ'(0) = 0`` had sent it through an attracting surface). Revived
        one layer only, the layers above took their sides one by one as their
        pre-activations, growing from 0 with the arriving unit's output, left their round-off
        bands, and the field in between was wrong: energy defect 8e-8 in a depth-10
        ``thm4`` run, where a point's reconnection cascaded through five layers in 1e-5)."""
        cut = self.cut(mode)[0]
        arriving = pending & (mode == INACTIVE) & ~cut
        params, h, carried = self.unravel(y), None, None
        revived, modes = [], []
        blocks = (layer_blocks(v, self.n, self.hidden_widths) for v in (arriving, cut, mode))
        for ell, (a, c, m) in enumerate(zip(*blocks, strict=True)):
            r = jnp.zeros(a.shape, bool) if carried is None else c & carried[None, :]
            z = jnp.zeros(a.shape) if h is None else params[ell] @ h
            up = r & (z > 0)
            h = jnp.where(a, 1.0, jnp.where(up, z, 0.0))
            carried = jnp.any(a | up | ((m != INACTIVE) & ~c), axis=0)
            revived.append(r.reshape(-1))
            modes.append(jnp.where(up, ACTIVE, INACTIVE).reshape(-1))
        return jnp.concatenate(revived), jnp.concatenate(modes)

    def vanished(self, mode):
        """``(P,)`` bool: units whose point has no *active* unit in some layer below (units
        held on their surfaces count as inactive). Where pending units at an event are the
        last active ones, the units this adds are their slaved units (:func:`gflow.kinks.decide`)."""
        return self._columns(mode, lambda m: m == ACTIVE)[0]

    def _columns(self, mode, carries):
        """Layer by layer from the bottom: the units with no carrier (``carries`` of their
        mode, not cut) at their point in the layer below, ``(P,)``; and per layer, whether
        each point has a carrier there, ``(L, n)``. A point has one in a layer where some
        unit there carries and it has one in every layer below (a cut unit carries
        nothing): a running "and" over the layers."""
        n, widths = self.n, self.hidden_widths
        some = jnp.any(carries(stacked_blocks(mode, n, widths, INACTIVE)), axis=1)  # [layer, point]
        has = jax.lax.cummin(some.astype(jnp.int32), axis=0) > 0
        cut = jnp.concatenate([jnp.zeros((1, n), bool), ~has[:-1]])
        return per_unit(cut, n, widths), has


class _Depth2Kinks:
    """Depth 2: what happens at a kink (0.2.4's rule; deeper networks:
    :func:`gflow.kinks.resolve`)."""

    def handle(self, y, data, mode, control, pending, initial=False):
        """Depth 2: resolve the units in ``pending`` at state ``y`` (they sit on their
        surfaces) by 0.2.4's rule, its results unchanged bit for bit: each arriving unit is
        decided by its one-sided rates, and a sliding unit whose control (each neuron's
        block solved exactly) leaves ``[0, 1]`` goes to that side. Returns ``(mode,
        control, pending_left, records, unresolved)`` as :func:`gflow.kinks.resolve` (deep
        networks) does; ``unresolved`` is always false here.
        At ``t = 0`` (``initial``) a unit given as sliding whose control lies outside
        ``[0, 1]`` (a run continued with another field: data, loss, weight decay) is not
        held by its surface, and its control does not tell where it goes (both one-sided
        rates may share a sign): it is decided as a unit found on its surface, and its
        record is its slide's end."""
        P = self.P
        _, control = self.equivalent_control(y, data, mode, control)
        gone = initial & (mode == SLIDING) & ((control < 0.0) | (control > 1.0))
        mode, pending = jnp.where(gone, INACTIVE, mode).astype(mode.dtype), pending | gone
        slopes = self.base_slopes(mode, control)
        # Units ending a slide leave towards the side their control is closest to.
        ending = pending & (mode == SLIDING)
        up = control >= 0.5
        # Units arriving at a surface: one tiny field evaluation per side and unit, at
        # most K of them per call.
        idx = jnp.nonzero(pending & (mode != SLIDING), size=self.K, fill_value=P)[0]
        valid = idx < P

        def rates(k):
            def rate(value):
                _, pdot = self.field_and_rates(y, data, jnp.append(slopes, 0.0).at[k].set(value)[:P])
                return jnp.append(pdot, 0.0)[k]

            return rate(1.0), rate(0.0)

        a_plus, a_minus = jax.vmap(rates)(idx)
        tol = _SIGN_TOL * (jnp.abs(a_plus) + jnp.abs(a_minus))
        plus_pos, plus_neg = a_plus > tol, a_plus < -tol
        minus_pos, minus_neg = a_minus > tol, a_minus < -tol
        was_active = jnp.append(mode, INACTIVE)[idx] == ACTIVE
        # Starting on the surface in the inactive mode (``initial``; σ'(0) = 0): only an
        # inactive field that lifts p off the surface changes anything.
        start = (
            ~was_active & minus_pos & plus_neg,
            ~was_active & minus_pos & ~plus_neg,
            jnp.zeros_like(was_active),
            ~was_active & minus_neg & plus_pos,
        )
        # Otherwise the guard fired, so the unit arrived from its own side: its own field
        # pushes into the surface, whatever round-off says. From the active side it slides
        # if the inactive field pushes back, touches and stays if the active field clearly
        # pushes away (a graze), else crosses (a_- ≈ 0 included: the convention σ'(0) = 0
        # makes a unit whose inactive field is tangent inactive, e.g. a dying neuron). The
        # inactive side mirrors this.
        stay = jnp.where(was_active, plus_pos, minus_neg)
        slide = ~stay & jnp.where(was_active, minus_pos, plus_neg)
        arrival = (
            slide,
            ~was_active & ~stay & ~slide,
            was_active & ~stay & ~slide,
            stay & jnp.where(was_active, minus_neg, plus_pos),
        )
        slide, rise, down, repel = (jnp.where(initial, a, b) for a, b in zip(start, arrival))
        new_mode_q = jnp.where(
            slide, SLIDING, jnp.where(down, INACTIVE, jnp.where(rise, ACTIVE, jnp.append(mode, 0)[idx]))
        )
        kind_q = jnp.where(
            slide, Kind.SLIDE_START, jnp.where(down | rise, Kind.CROSS, jnp.where(repel, Kind.REPEL, Kind.TOUCH))
        )
        dir_q = jnp.where(rise, 1, jnp.where(down, -1, 0))
        a_minus_in = jnp.maximum(a_minus, 0.0)
        a_plus_in = jnp.minimum(a_plus, 0.0)
        c_q = jnp.where(slide, a_minus_in / jnp.where(slide, a_minus_in - a_plus_in, 1.0), 0.0)
        record_q = valid & jnp.where(initial, slide | rise | repel, True)

        def put(base, values):
            return jnp.append(base, base[:1]).at[idx].set(jnp.where(valid, values, jnp.append(base, base[:1])[idx]))[:P]

        mode1 = jnp.where(ending, jnp.where(up, ACTIVE, INACTIVE), mode)
        mode1 = put(mode1, new_mode_q)
        control1 = put(control, c_q)
        mask1 = ending | put(jnp.zeros(P, bool), record_q)
        kind1 = jnp.where(ending, Kind.SLIDE_END, put(jnp.zeros(P, jnp.int32), kind_q.astype(jnp.int32)))
        dir1 = jnp.where(ending, jnp.where(up, 1, -1), put(jnp.zeros(P, jnp.int32), dir_q.astype(jnp.int32)))
        handled = ending | put(jnp.zeros(P, bool), valid)
        # Joint controls of the new sliding set (each neuron's controls solve their own
        # affine block exactly): a control below 0 leaves to the inactive side, above 1 to
        # the active side.
        _, control2 = self.equivalent_control(y, data, mode1, control1)
        up2 = control2 > 1.0
        leave = (mode1 == SLIDING) & ((control2 < 0.0) | (control2 > 1.0))
        mode2 = jnp.where(leave, jnp.where(up2, ACTIVE, INACTIVE), mode1)
        leave_dir = jnp.where(up2, 1, -1).astype(jnp.int32)
        # A unit that would start sliding and leave in the same instant has simply crossed
        # (or touched, if it leaves to the side it came from): one event, one record.
        merged = leave & mask1 & (kind1 == Kind.SLIDE_START)
        crossed = mode2 != mode
        kind1 = jnp.where(merged, jnp.where(crossed, Kind.CROSS, Kind.TOUCH), kind1)
        dir1 = jnp.where(merged, jnp.where(crossed, leave_dir, 0), dir1)
        gone_dir = jnp.where(mode2 == ACTIVE, 1, -1).astype(jnp.int32)
        records = (
            (mask1 & ~gone, kind1, dir1),
            (leave & ~merged, jnp.full(P, int(Kind.SLIDE_END), jnp.int32), leave_dir),
            (gone & (mode2 != SLIDING), jnp.full(P, int(Kind.SLIDE_END), jnp.int32), gone_dir),
        )
        return mode2.astype(mode.dtype), control2, pending & ~handled, records, jnp.zeros((), bool)


class System(_Field, _Controls, _Depth2Controls, _Guards, _Depth2Kinks):
    """The gradient field of one network on one data set, and its kinks: the smooth pieces
    (:class:`_Field`), the sliding controls (:class:`_Controls`; depth 2 in closed form,
    :class:`_Depth2Controls`), the event guards and the units the data cannot reach
    (:class:`_Guards`), and depth 2's rule at a kink (:class:`_Depth2Kinks`).

    Built once per (network shape, loss); all methods act on one trajectory (flat
    parameter vector ``y``) and are vmapped by :mod:`gflow.flow`.
    """


_SLOT_CHUNK = 4  # slots per pass of the loop of System.rates_jacobian


def _over_used_slots(chunk, used, *args):
    """``chunk`` (vmapped over slots) over the slots up to the last ``used`` one, ``_SLOT_CHUNK``
    at a time, the rows past it zero. Its cost follows the units sliding, not the slot
    count: one slot count serves every number of them without paying ``K`` columns for a
    few (:func:`slot_sizes`). At most ``_SLOT_CHUNK`` slots: ``chunk`` once, no loop."""
    K = used.shape[0]
    if K <= _SLOT_CHUNK:
        return chunk(*args)
    C = _SLOT_CHUNK
    pad = -K % C
    args = [jnp.pad(a, (0, pad)) for a in args]
    last = jnp.max(jnp.where(used, jnp.arange(1, K + 1), 0))
    shapes = jax.eval_shape(chunk, *(a[:C] for a in args))
    out0 = [jnp.zeros((K + pad,) + s.shape[1:], s.dtype) for s in shapes]

    def body(i, out):
        part = chunk(*(jax.lax.dynamic_slice_in_dim(a, i * C, C) for a in args))
        return [jax.lax.dynamic_update_slice_in_dim(o, p, i * C, 0) for o, p in zip(out, part)]

    return [o[:K] for o in jax.lax.fori_loop(0, (last + C - 1) // C, body, out0)]


# Depth 2 with at most this many points: per-neuron block solves. Each block is n × n
# whatever the number of sliding units, so above this the gathered K-slot solve is
# faster at run time though slower to compile (2-2-2 net, 64 random starts, random unit
# data, t1 150, 2 devices: n = 6: 1.83 → 0.43 s, n = 8: 6.9 → 1.16 s, compile +10 to
# +25 s; n = 4, 5: 1.8-1.9× faster for +30 s of compilation, so they keep the blocks).
_BLOCK_POINTS = 5
_ENTRIES_LIMIT = 24  # n·D up to which they are written out scalar by scalar


def _solve_entries(A, b):
    """:func:`_solve_small` for one system given entry by entry (``A`` a list of rows of
    scalars, ``b`` a list of scalars), returning a list of scalars."""
    n = len(b)
    M = [list(row) + [b_r] for row, b_r in zip(A, b)]
    for col in range(n):
        for r in range(col + 1, n):  # partial pivoting: the largest candidate to row col
            swap = jnp.abs(M[r][col]) > jnp.abs(M[col][col])
            M[col], M[r] = (
                [jnp.where(swap, u, v) for u, v in zip(M[r], M[col])],
                [jnp.where(swap, v, u) for u, v in zip(M[r], M[col])],
            )
        pivot = [v / M[col][col] for v in M[col]]
        M = [pivot if r == col else [v - M[r][col] * p for v, p in zip(M[r], pivot)] for r in range(n)]
    return [M[r][n] for r in range(n)]
