"""What happens at a kink of a deep network, in the order it happens.

The integrator (:mod:`gflow.flow`) stops at the instant a guard changes sign (a unit
reaching its surface, a sliding unit's control reaching 0 or 1, or a sliding unit
drifting off its surface) and, at the end of that forced step, calls :func:`resolve`
for the member:

1. **Decide** (:func:`decide`): the units that reached their surfaces (less those with
   a twin clearly off its surface, which take its side, :func:`gflow.twins.astray`; with
   the live units within their band whose landing makes one of them a twin,
   :func:`gflow.twins.landing`) and every sliding unit are decided together by the box
   complementarity problem of :mod:`gflow.sliding` (the derivation is in its
   docstring): which slide, with which controls, and to which side the others go.
   Bias-free networks add three structural cases (slaved, cut and revived units), which
   change the field, so the problem is solved again on what remains until nothing more
   is cut.
2. **Past the band** (:func:`past_the_band`): a unit the decision kept on its side while
   its pre-activation lies beyond half a round-off band on the other takes that side.
3. **Settle** (:func:`settle`): units whose pre-activations the new modes moved beyond
   their band on the other side of their surfaces take the mode of their side.
4. **Onto the surfaces** (:func:`onto_surfaces`, called by the integrator for the batch
   once the modes are decided, the round at ``t = 0`` included): sliding units more than
   half a band off their surfaces are put on them by the least weight change that keeps
   the balance laws to first order; the loss change is summed in the solution's
   ``stats["surface_jump"]``.

Depth 2 has its own rule, 0.2.4's (:meth:`gflow.events.System.handle`).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from . import sliding, twins
from .events import ACTIVE, INACTIVE, SLIDING, Kind, _noise
from .networks import _times_transpose
from .sliding import _SIGN_TOL


def resolve(system, y, data, mode, control, pending, initial, rtol, atol, rate_floor):
    """One member's kink round at state ``y``: the units in ``pending`` (on their
    surfaces) and every sliding unit decided together (:func:`decide`), then the units
    the decision kept on their sides beyond their round-off band (:func:`past_the_band`)
    and those the new modes moved past theirs (:func:`settle`). ``initial`` at ``t = 0``,
    where the units given as sliding are decided with those on their surfaces and only
    what changes is recorded. ``control``: the sliding units' equivalent controls at ``y``
    (the integrator's guards solve them at each step's end), the decision's start.
    ``rate_floor``: rates of units on their surfaces below it count as zero (the integrator
    passes a hundredth of ``atol``, a drift below the integration error).

    Returns ``(mode, control, pending_left, records, unresolved)``: ``records`` a tuple of
    ``(mask, kind, direction)`` triples of ``(P,)`` arrays (the decision's, then the
    settled units'); ``pending_left`` the units not handled yet (more than ``K`` at once);
    ``unresolved`` true where the decision could not be solved to tolerance
    (:attr:`gflow.Status.KINK_UNRESOLVED`)."""
    n, widths, X = system.n, system.hidden_widths, data[0]
    p = system.preacts(y, data, system.base_slopes(mode, control), held=True)
    band = _noise(p, rtol, atol)
    # An arriving unit with a twin clearly off its surface has not arrived: it takes its
    # twin's side (gflow.twins.astray).
    pairs = twins.shared(n, widths, jnp.where(pending, INACTIVE, mode), X)
    off = ~pending & (mode != SLIDING) & (jnp.abs(p) > band)
    astray, up = twins.astray(n, widths, pairs, pending, off, p)
    astray = astray & ~initial
    side = jnp.where(up, ACTIVE, INACTIVE).astype(mode.dtype)
    turned = astray & (side != mode)
    mode, pending = jnp.where(astray, side, mode), pending & ~astray
    # Live units within their band that make an arriving unit a twin land with it.
    near = (mode == ACTIVE) & ~pending & (jnp.abs(p) <= 0.5 * band)
    landing = twins.landing(n, widths, mode, pending, near, X) & ~initial
    pending = pending | landing
    before, involved = mode, pending | (mode == SLIDING)  # involved: at their surfaces
    mode, control, left, records, unresolved = decide(system, y, data, mode, control, pending, initial, rate_floor)
    (mask, kind, direction), *rest = records
    mask = mask & ~(landing & (mode == before))  # those that stay live did not land
    rest = [(turned, jnp.full_like(kind, int(Kind.CROSS)), jnp.where(up, 1, -1).astype(direction.dtype)), *rest]
    mode, past = past_the_band(system, y, data, before, mode, control, pending & ~initial, rtol, atol)
    kind = jnp.where(past, int(Kind.CROSS), kind)
    direction = jnp.where(past, jnp.where(mode == ACTIVE, 1, -1), direction)
    records = ((mask | past, kind, direction), *rest)
    settled_mode, settled = settle(system, y, data, before, mode, control, involved, rtol, atol)
    mode = jnp.where(initial, mode, settled_mode)
    records = records + (jax.tree.map(lambda a: jnp.where(initial, jnp.zeros_like(a), a), settled),)
    return mode, control, left, records, unresolved


def decide(system, y, data, mode, control, pending, initial, rate_floor):
    """The decision: every unit on its surface is decided at once by the box
    complementarity problem (:func:`gflow.sliding.complementarity`). Returns ``(mode,
    control, pending_left, records, unresolved)`` (:func:`resolve`).

    The set decided is the pending units and every sliding unit, each started from its
    present slope (1 from the active side, 0 from the inactive side, its control if it
    slides), and their twins (:mod:`gflow.twins`), each class one unit with its
    carrier's control (classes read with the arriving units not live; where one goes
    active and parts a class, the problem is solved again with the classes of the new
    modes). Three cases are structural rather than decided (bias-free networks):

    - *Slaved* units: where pending units are the last active ones of their layer at a
      point, every unit above them there sits at its surface too, its pre-activation
      proportional to theirs. They keep the modes they had while the units below stay
      (on the active side, the field backpropagates through them) and are cut when those
      leave.
    - *Cut* units (:meth:`gflow.events.System.cut`): a point with no activation left in a layer has
      pre-activation 0 in every unit above it, whatever the weights do; by
      ``σ'(0) = 0`` they are inactive. A unit held on its surface whose slope then acts
      on nothing (*stranded*) leaves by the sign of its own rate.
    - *Revived* units (:meth:`gflow.events.System.revived`): cut units above a unit arriving from its
      inactive side, the first that can carry its point again, take the modes they
      have on its active side while it is decided (so that side's field backpropagates
      through them), keep them if it slides or goes active (recorded as crossings with it
      if it goes active), and are cut again if not.

    Cuts change the field, so the problem is solved again on what remains until
    nothing more is cut (at most one round per hidden layer)."""
    P = system.P
    slaved = system.vanished(jnp.where(pending, INACTIVE, mode)) & ~system.vanished(mode)
    # Twins of a unit on its surface are on it too (one surface, gflow.twins), but not
    # where a live unit below reaches its own (pending units do not count as live).
    X = data[0]
    pairs = twins.shared(system.n, system.hidden_widths, jnp.where(pending, INACTIVE, mode), X)
    main = twins.with_twins(system.n, system.hidden_widths, pairs, (mode == SLIDING) | pending) & ~slaved
    # The twins of an arriving unit arrive with it, and reconnect their points with it.
    revived, revived_mode = system.revived(y, mode, twins.with_twins(system.n, system.hidden_widths, pairs, pending))
    idx = jnp.nonzero(main, size=system.K, fill_value=P)[0]
    # More than K: the sliding units take the slots first and the arrivals left over
    # are decided in the next round (they keep their sides meanwhile).
    first = jnp.argsort(jnp.where(main, (mode != SLIDING).astype(jnp.int32), 2), stable=True)[: system.K]
    idx = jnp.where(jnp.sum(main) > system.K, jnp.where(main[first], first, P), idx)
    valid = idx < P
    decided = jnp.zeros(P + 1, bool).at[idx].set(valid)[:P]
    start = jnp.append(jnp.where(mode == SLIDING, control, (mode == ACTIVE).astype(control.dtype)), 0.0)[idx]

    # Units arriving at their surfaces stay on their sides while the sliding units'
    # controls are solved with them there (first round only).
    arriving = valid & (jnp.append(mode, SLIDING)[idx] != SLIDING)
    # A class of twins is decided as one unit: its passengers' slopes are its carrier's.
    tie = twins.ties(system, idx, valid, pairs, main)

    def solve(mode_now, c0, first, tie):
        """The problem on the units in the slots that are still on their surfaces."""
        on = valid & (jnp.append(mode_now, INACTIVE)[idx] == SLIDING)
        base = system.base_slopes(mode_now, jnp.zeros_like(control))
        dec = sliding.complementarity(
            system, y, data, base, jnp.where(on, idx, P), on, c0, hold=arriving & first, rate_floor=rate_floor, tie=tie
        )
        side = jnp.where(dec.slide, SLIDING, jnp.where(dec.up, ACTIVE, INACTIVE))
        mode_new = jnp.append(mode_now, INACTIVE).at[idx].set(jnp.where(on, side, jnp.append(mode_now, 0)[idx]))
        return mode_new[:P].astype(mode.dtype), dec, on

    def round_(carry):
        mode_now, c, dec, cut_all, tie, _, first = carry
        mode_new, dec_new, on = solve(mode_now, c, first, tie)
        dec = jax.tree.map(lambda new, old: jnp.where(on, new, old) if old.ndim else new, dec_new, dec)
        c = jnp.where(on, dec_new.control, c)
        # Slaved units are cut when the units below them leave their surfaces to the
        # inactive side; points without activation cut every unit above them.
        masters = jnp.where(pending & (mode_new == SLIDING) & (mode != SLIDING), ACTIVE, mode_new)
        cut = (system.cut(mode_new)[0] | (slaved & system.vanished(masters))) & (mode_new != INACTIVE)
        mode_new = jnp.where(cut, INACTIVE, mode_new)
        # Held units whose slope acts on nothing leave by the sign of their own rate.
        rate = jnp.append(jnp.zeros(P), 0.0).at[idx].set(jnp.where(on, dec_new.a_minus, 0.0))[:P]
        stranded = (mode_new == SLIDING) & system.cut(mode_new)[1]
        mode_new = jnp.where(stranded, jnp.where(rate > 0, ACTIVE, INACTIVE), mode_new).astype(mode.dtype)
        # Twin classes by the new modes: a unit that arrived and went active parts the
        # twins above it (they were solved as one); they are solved again, apart (once).
        tie_new = twins.ties(system, idx, valid, twins.shared(system.n, system.hidden_widths, mode_new, X), main)
        parted = jnp.any(tie_new != tie) & first
        return mode_new, c, dec, cut_all | cut, tie_new, jnp.any(cut | stranded) | parted, jnp.zeros((), bool)

    # Every decided unit on its surface; revived units in their modes (cut again below
    # if the units under them do not stay).
    mode0 = jnp.where(decided, SLIDING, jnp.where(revived, revived_mode, mode)).astype(mode.dtype)
    empty = sliding.Decision(
        control=start, slide=valid, up=jnp.zeros_like(valid), a_plus=jnp.zeros_like(start),
        a_minus=jnp.zeros_like(start), residual=jnp.zeros(()), iterations=jnp.zeros((), jnp.int32),
    )  # fmt: skip
    carry = (mode0, start, empty, jnp.zeros(P, bool), tie, jnp.ones((), bool), jnp.ones((), bool))
    rounds = jax.lax.while_loop(lambda c: c[-2], round_, carry)
    mode1, cK, dec, cut, *_ = rounds
    control1 = jnp.append(control, 0.0).at[idx].set(jnp.where(valid, cK, jnp.append(control, 0.0)[idx]))[:P]

    # Records: each unit decided, by where it was and where it went.
    was_sliding = mode == SLIDING
    arrived = decided & ~was_sliding
    slides = mode1 == SLIDING
    crossed = arrived & ~slides & (mode1 != mode)
    # Revived units carried by an arriving unit that went active cross with it.
    crossed = crossed | (revived & (mode1 == ACTIVE) & ~system.vanished(mode1))
    kind_q = lambda v: jnp.full(P, int(v), jnp.int32)  # noqa: E731
    a_plus = jnp.append(jnp.zeros(P), 0.0).at[idx].set(jnp.where(valid, dec.a_plus, 0.0))[:P]
    a_minus = jnp.append(jnp.zeros(P), 0.0).at[idx].set(jnp.where(valid, dec.a_minus, 0.0))[:P]
    tol = _SIGN_TOL * (jnp.abs(a_plus) + jnp.abs(a_minus))
    repel = arrived & ~slides & ~crossed & (a_plus > tol) & (a_minus < -tol)
    kind = jnp.select(
        [cut & (mode != INACTIVE), was_sliding & ~slides, arrived & slides, crossed, repel],
        [
            kind_q(Kind.CUT),
            kind_q(Kind.SLIDE_END),
            kind_q(Kind.SLIDE_START),
            kind_q(Kind.CROSS),
            kind_q(Kind.REPEL),
        ],
        kind_q(Kind.TOUCH),
    )
    up = mode1 == ACTIVE
    direction = jnp.where(kind == Kind.CUT, -1, jnp.where((kind == Kind.SLIDE_END) | crossed, jnp.where(up, 1, -1), 0))
    mask = jnp.where(
        initial,
        (decided | cut | crossed) & ((mode1 != mode) | repel),
        (decided & ~(was_sliding & slides)) | (cut & (mode != INACTIVE)) | (pending & slaved) | crossed,
    )
    handled = decided | (pending & slaved)
    unresolved = jnp.any(valid) & (dec.residual > sliding.SOLVED)
    # The sliding units fill the slots and units arrive: no round can decide them, and
    # deciding the sliding units without them would be wrong. Nothing is decided; the
    # arriving units are reported on their surfaces, and the integrator stops the
    # member with SLIDING_LIMIT (their count is then above ``K``).
    arrivals = pending & ~slaved & (mode != SLIDING)
    overflow = jnp.any(arrivals) & (jnp.sum(main & (mode == SLIDING)) >= system.K)
    mode1 = jnp.where(overflow, jnp.where(arrivals, SLIDING, mode), mode1).astype(mode.dtype)
    control1 = jnp.where(overflow, control, control1)
    records = ((mask & ~overflow, kind, direction.astype(jnp.int32)),)
    return mode1, control1, pending & ~handled & ~overflow, records, unresolved & ~overflow


def past_the_band(system, y, data, before, mode, control, arrived, rtol, atol):
    """Deep networks: units that arrived at their surfaces (``arrived``) and that the
    decision kept on their sides (their one-sided rates zero within the rate floor:
    :attr:`Kind.TOUCH`) while their pre-activation lies more than half a round-off band
    (:func:`_noise`) on the other side take the mode of that side: ``(mode, past)``.

    A unit fires there only from the band's edge, once it has come back past its surface
    after an event left its guard unarmed; with rates that tell neither side, keeping its
    mode left it at that edge to fire again at once. In ``tests/test_flow.py``'s
    depth-4 balance run (seed 2, t ≈ 342–362, rates at round-off in the converged tail)
    one unit touched 414 times with 0.3.5 and, round-off moved by 0.3.6's slot counts,
    751 times without this rule, which stopped the member with ``MAX_EVENTS``. Units at
    their surfaces (``|p|`` below half a band) keep the decision: there the rates decide."""
    p = system.preacts(y, data, system.base_slopes(mode, control), held=True)
    mode, up, down = to_their_side(mode, arrived & (mode == before), p, 0.5 * _noise(p, rtol, atol))
    return mode, up | down


def to_their_side(mode, which, p, band):
    """Units of ``which`` more than ``band`` past their surfaces on the other side of their
    modes (inactive at ``p > band``, active at ``p < −band``) take that side's mode:
    ``(mode, up, down)``, ``up`` and ``down`` the units that switched to either side."""
    up = which & (mode == INACTIVE) & (p > band)
    down = which & (mode == ACTIVE) & (p < -band)
    return jnp.where(up, ACTIVE, jnp.where(down, INACTIVE, mode)).astype(mode.dtype), up, down


def settle(system, y, data, before, mode, control, involved, rtol, atol):
    """Deep networks, after the modes of an event are decided (``before`` → ``mode``): units
    whose pre-activations the new modes moved clearly to the other side of their surfaces
    take the mode of their side.

    The engine's forward passes use the modes' slopes, so when a unit switches mode, the
    pre-activations above it at its point jump by its output: a unit that fires at the
    edge of its round-off band switches from 0 to ``p`` ≈ band at once (for
    ``relu(p)`` that change is continuous). A unit above it may then start beyond its
    own band on the wrong side of its mode, where its guard is already negative and never
    changes sign: in a depth-4 thm4 run (``λ = 1e-2``) two third-layer units at a point
    whose lower layers had just revived stayed inactive on the active side (``p`` up to
    +0.017 and +0.026), one of them to the end of the run. Such units cross now (a :attr:`Kind.CROSS` record towards their
    side); then units whose point has no activation left below are cut (inactive,
    :attr:`Kind.CUT`), as in :func:`decide`. Layer by layer from the bottom, since
    a layer's pre-activations depend on the modes below it. Only units whose
    pre-activation the event moved are looked at, and none ``involved`` in it (handled,
    still pending or sliding: they sit at their surfaces, where their rates decide):
    others are left to their guards, which allow a unit that has just touched its surface
    to sit within its band on the other side. Returns ``(mode, (mask, kind, direction))``.

    The layers are one loop (its body a full forward pass, the layer an index), so the
    program does not grow with the depth."""
    n, widths = system.n, system.hidden_widths
    layer = jnp.asarray(np.repeat(np.arange(len(widths)), [d * n for d in widths]))
    p_before = system.preacts(y, data, system.base_slopes(before, control), held=True)

    def one_layer(ell, carry):
        mode, mask, kind, direction = carry
        p = system.preacts(y, data, system.base_slopes(mode, control), held=True)
        here = (layer == ell) & ~involved & (p != p_before)
        mode, up, down = to_their_side(mode, here, p, _noise(p, rtol, atol))
        cut = system.cut(mode)[0] & (mode != INACTIVE) & ~involved
        mode = jnp.where(cut, INACTIVE, mode).astype(mode.dtype)
        kind = jnp.where(up | down, int(Kind.CROSS), jnp.where(cut, int(Kind.CUT), kind))
        direction = jnp.where(up, 1, jnp.where(down | cut, -1, direction))
        return mode, mask | up | down | cut, kind, direction

    # The first layer's pre-activations depend on no mode.
    empty = tuple(jnp.zeros(system.P, t) for t in (bool, jnp.int32, jnp.int32))
    mode, *records = jax.lax.fori_loop(1, len(widths), one_layer, (mode, *empty))
    return mode, tuple(records)


def onto_surfaces(system, y, data, mode, control, floor):
    """Deep networks: ``y`` with every sliding unit more than ``floor`` off its surface
    put on it by the least change of the weights that keeps the balance laws (SPEC §3)
    to first order. A sliding control holds ``ṗ = 0`` wherever the slide starts, and a
    unit whose guard its last event disarmed fires only at its round-off band's edge
    (:func:`gflow.events._noise`), so it can slide a band off its surface for good.

    Layer by layer from the first, ``W`` (``d × a``, inputs ``H``, ``n × a``) moves by
    the least ``Δ`` (Frobenius) with ``Δ_j·h_i = −p_ji`` for the units ``(j, i)`` to
    move, ``W_j·Δ_j = 0`` for every row (the invariant ``‖W_l[j,:]‖² − ‖W_{l+1}[:,j]‖²``
    of neuron ``j``) and, above the first layer, ``Σ_j W_jk Δ_jk = 0`` for every column
    (that of neuron ``k`` below), :func:`_least_move`; the layer's outputs are then
    recomputed with the modes' slopes for the next. Each invariant then moves by
    ``‖Δ‖²``-sized terms, ``(|p|/‖h‖)²``: 1e-14 for a unit 1.5e-7 off with ``‖h‖ = 1.3``
    (the 20-point Scale problem), where the surface rows alone moved the invariants
    below by 2e-8. Consecutive layers of one shape above the first are one loop, so
    the program does not grow with the depth."""
    X = jnp.asarray(data[0])
    params = system.unravel(y)
    slopes = system._slope_list(system.base_slopes(mode, control))
    # Passengers of a twin class share their carrier's surface: its move puts them on it.
    on_surface = mode == SLIDING
    pairs = twins.shared(system.n, system.hidden_widths, mode, X)
    riders = twins.passengers(system.n, system.hidden_widths, pairs, on_surface)
    sliding = system._slope_list(on_surface & ~riders)

    def one_layer(h, W, s, on, columns=True):
        p = _times_transpose(h, W, system.small)  # [point, neuron]
        W = W + _least_move(W, h, (on & (jnp.abs(p) > floor)).T, p.T, columns=columns)
        return s * _times_transpose(h, W, system.small), W

    layers = list(zip(params[:-1], slopes, sliding))
    h, W = one_layer(X, *layers[0], columns=False)
    moved = [W]
    for _, run in itertools.groupby(layers[1:], key=lambda layer: layer[0].shape):
        run = list(run)
        if len(run) == 1:
            h, W = one_layer(h, *run[0])
            moved.append(W)
        else:
            stacked = [jnp.stack(parts) for parts in zip(*run)]
            h, Ws = jax.lax.scan(lambda h, layer: one_layer(h, *layer), h, stacked)
            moved.extend(Ws)
    flat = jnp.concatenate([W.reshape(-1) for W in moved + [params[-1]]])
    return jnp.concatenate([flat, y[flat.shape[0] :]])


def _least_move(W, h, S, p, columns):
    """The least ``Δ`` (Frobenius) of a layer's weights ``W`` (``d × a``; inputs ``h``,
    ``n × a``) with ``Δ_j·h_i = −p_ji`` where ``S`` (``[neuron, point]``), ``W_j·Δ_j = 0``
    for every row and, with ``columns``, ``Σ_j W_jk Δ_jk = 0`` for every column
    (:func:`onto_surfaces`): ``Δ = Cᵀz`` with ``(C Cᵀ + ridge) z = b``, ``C Cᵀ``
    from differentiating ``z ↦ C Cᵀ z`` (rows of units not moved, and of columns without
    ``columns``: ``z`` itself, so their multipliers are 0; the ridge, 1e-14 of its scale,
    for the empty rows of dead neurons)."""
    d, a = W.shape
    sizes = np.cumsum([S.size, a])

    def delta(z):
        mu, nu, rho = jnp.split(z, sizes)
        nu = nu if columns else jnp.zeros_like(nu)
        return (jnp.where(S, mu.reshape(d, -1), 0.0) @ h) + W * nu[None, :] + rho[:, None] * W

    def gram(z):
        mu, nu, _ = jnp.split(z, sizes)
        D = delta(z)
        surface = jnp.where(S, D @ h.T, mu.reshape(d, -1))
        return jnp.concatenate([surface.reshape(-1), jnp.sum(W * D, axis=0) if columns else nu, jnp.sum(W * D, axis=1)])

    N = S.size + a + d
    A = jax.jacfwd(gram)(jnp.zeros(N, W.dtype))
    ridge = 1e-14 * jnp.max(jnp.abs(jnp.diagonal(A)))
    b = jnp.concatenate([jnp.where(S, -p, 0.0).reshape(-1), jnp.zeros(a + d, W.dtype)])
    return delta(jnp.linalg.solve(A + ridge * jnp.eye(N, dtype=W.dtype), b))
