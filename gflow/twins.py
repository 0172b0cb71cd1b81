"""Twins: units of one neuron at two points that share one surface.

In a bias-free network, where the input of hidden layer ``ℓ ≥ 1`` at two points ``x``
and ``x'`` is one live unit ``k`` of the layer below, the same at both (every other unit
there inactive or held on its surface, so outputting 0), neuron ``j``'s
pre-activations are ``p(x) = W[j, k]·h_k(x)`` and ``p(x') = W[j, k]·h_k(x')`` with
``h_k > 0`` at both: positive multiples of each other while the modes below last. The
same holds where both points have the same live units in the layer below and twin
inputs to it (ReLU is positively homogeneous: the outputs are then multiples too), so
twins propagate upwards (:func:`shared`). Two such units vanish together and their rates
are multiples of each other: they sit on one surface, the *twins* of a class.

**One surface, one control.** Twin pre-activations never have different signs, so no
activation pattern a network can visit, and no step of gradient descent, gives them
different slopes: the Filippov set of the flow is the convex hull over the patterns that
occur, where twins share a slope. (With a control per twin the box problem of
:mod:`gflow.sliding` is singular — the shared condition is one equation — and its
solutions include splits, one twin at a bound and the other inside, that hold the
surface where the shared slope cannot; gflow 0.5.5 named one twin at a time that way.)
The engine therefore gives a class one control, its *carrier*'s (the unit at the class's
lowest point; the others are its *passengers*, :func:`passengers`): in the solves the
passengers' slopes are the carrier's control, the carrier's column of the rates'
Jacobian is the sum of the class's columns, and a passenger's row is decoupled
(:func:`gflow.sliding._residual_and_jacobian`, through the slot map :func:`ties`). At a
kink the twins of a unit on its surface are decided with it (:func:`with_twins`), as one
unit: the class slides, or leaves to one side, together.

In the first layer, twins are the units of one neuron at data points that are positive
multiples of each other (a duplicated point, say): read off the data; every other test
here reads modes only, never the weights. Inputs that are multiples of each other by
chance, at an instant (two live units or more, not fed by twins), are not twins: their
surfaces meet there and part again.

**Twins made by a landing.** A unit becomes the twin of a unit on its surface at the
instant a live unit below lands on its own (its output leaves the layer's input, which
becomes a multiple of the twin's): the upper unit's pre-activation reaches 0 at that
same instant. Integrated, the two arrivals are two roots a round-off band apart (the
twin slides within its band, not at ``p = 0`` exactly), so either can come first; the
landing units are decided with the upper unit's arrival (:func:`landing`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .events import ACTIVE, INACTIVE, SLIDING
from .networks import flat_blocks, index_table, per_unit, stacked_blocks


def shared(n, widths, mode, X=None):
    """``(L, n, n)`` bool, one matrix per hidden layer: the pairs of distinct points whose
    inputs to that layer are positive multiples of each other, as the modes tell: the
    layer below has one live unit at both, the same, or the same live units at both with
    inputs to it that are multiples (ReLU is positively homogeneous). In the first layer,
    the data points ``X`` ``(n, d)`` that are positive multiples of each other (their
    directions 1e-12 apart at most; none without ``X``). Units of one neuron at such
    points are twins. Every layer at once (:func:`gflow.networks.stacked_blocks`), the
    chain upwards three operations a layer."""
    live = stacked_blocks(mode, n, widths, INACTIVE)[:-1] == ACTIVE  # [layer below, neuron, point]
    alike = jnp.all(live[:, :, :, None] == live[:, :, None, :], axis=1) & jnp.any(live, axis=1)[:, :, None]
    alike = alike & ~jnp.eye(n, dtype=bool)
    single = (jnp.sum(live, axis=1) == 1)[:, :, None]
    out = [jnp.zeros((n, n), bool) if X is None else _multiples(X)]
    for ell in range(len(widths) - 1):
        out.append(alike[ell] & (single[ell] | out[-1]))
    return jnp.stack(out)


def _multiples(X):
    """``(n, n)`` bool: the pairs of distinct nonzero rows of ``X`` that are positive
    multiples of each other, their directions 1e-12 apart at most."""
    X = jnp.asarray(X)
    norms = jnp.linalg.norm(X, axis=1)
    U = X / jnp.where(norms > 0, norms, 1.0)[:, None]
    close = jnp.max(jnp.abs(U[:, None, :] - U[None, :, :]), axis=2) <= 1e-12
    return close & (norms > 0)[:, None] & (norms > 0)[None, :] & ~jnp.eye(X.shape[0], dtype=bool)


def landing(n, widths, mode, pending, near, X=None):
    """``(P,)`` bool: the units of ``near`` (live units within their round-off band of
    their surfaces) whose landing makes a unit of ``pending`` (arriving at its surface) the
    twin of another unit at its surface (pending or ``SLIDING``): those below such a pair
    at either of its points, in any layer (the twin pairs :func:`shared` with ``near``
    not live beside ``pending``, against those without). They are decided with the
    arrival: the exact flow has both arrivals at one instant."""
    apart = shared(n, widths, jnp.where(pending, INACTIVE, mode), X)
    joined = shared(n, widths, jnp.where(pending | near, INACTIVE, mode), X) & ~apart
    arriving, at = (
        stacked_blocks(m, n, widths, False).astype(jnp.int32) for m in (pending, pending | (mode == SLIDING))
    )
    # [layer, point]: points of a new pair of an arriving unit with a unit at its surface.
    new = jnp.any(joined & (jnp.swapaxes(arriving, 1, 2) @ at > 0), axis=2)
    points = new | jnp.any(joined & new[:, None, :], axis=2)
    # A near unit in layer ℓ counts where a layer above it has such a point.
    above = jnp.flip(jnp.cumsum(jnp.flip(points[1:], 0), axis=0), 0) > 0
    above = jnp.concatenate([above, jnp.zeros((1, n), bool)])
    return near & per_unit(above, n, widths)


def astray(n, widths, pairs, pending, off, p):
    """Units of ``pending`` with a twin (``pairs``) clearly off its surface (``off``: beyond
    its round-off band, neither pending nor sliding), and whether such a twin is on its
    active side: ``(astray, up)``, ``(P,)`` bool each. Twins are positive multiples of each
    other, so such a unit has not reached its surface: its pre-activation is within its
    band only because its point's signal is small (a point just reconnected, whose
    pre-activations grow from 0), and it takes its twin's side."""
    o, q = stacked_blocks(off, n, widths, False), stacked_blocks(p, n, widths, 0.0)
    twin = pairs.astype(jnp.int32)
    up = (o & (q > 0)).astype(jnp.int32) @ twin > 0  # [layer, neuron, point]: a twin off on its active side
    down = (o & (q < 0)).astype(jnp.int32) @ twin > 0
    return pending & flat_blocks(up | down, n, widths), flat_blocks(up, n, widths)


def with_twins(n, widths, pairs, mask):
    """``(P,)`` bool: the units of ``mask`` and their twins (``pairs``, :func:`shared`)."""
    m = stacked_blocks(mask, n, widths, False)
    return mask | flat_blocks(m.astype(jnp.int32) @ pairs.astype(jnp.int32) > 0, n, widths)


def passengers(n, widths, pairs, among):
    """``(P,)`` bool: the units of ``among`` with a twin in ``among`` (``pairs``,
    :func:`shared`) at a lower point, the class's carrier (the unit at its lowest point)."""
    lower = np.tril(np.ones((n, n), bool), -1)  # [x, x']: x' < x
    m = stacked_blocks(among, n, widths, False)
    return among & flat_blocks(jnp.any(pairs[:, None] & lower & m[:, :, None, :], axis=3), n, widths)


def ties(system, idx, valid, pairs, among):
    """``(K,)`` ints over the slots ``idx`` of a sliding solve or kink problem: the slot of
    each unit's carrier among ``among`` (:func:`passengers`; its own slot for a carrier or
    a unit without twins), for the solves to give every unit of a class its carrier's
    control."""
    riders = jnp.append(passengers(system.n, system.hidden_widths, pairs, among), False)[idx] & valid
    layer, neuron, point = (jnp.append(a, 0)[idx] for a in index_table(system.n, system.hidden_widths))
    same = (layer[:, None] == layer[None, :]) & (neuron[:, None] == neuron[None, :]) & valid[:, None] & valid[None, :]
    carried = same & pairs[layer[:, None], point[:, None], point[None, :]] & riders[:, None] & ~riders[None, :]
    return jnp.where(jnp.any(carried, axis=1), jnp.argmax(carried, axis=1), jnp.arange(idx.shape[0]))
