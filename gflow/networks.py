"""Bias-free fully connected ReLU networks: parameters, forward pass, initialisers.

Parameters are a list ``[W_1, ..., W_k]`` of weight matrices, ``W_l`` of shape
``(d_l, d_{l-1})`` (out x in, as in the paper). Data ``X`` has one point per row,
shape ``(n, d_0)``.

A *pre-activation* is one entry ``p[l, j, i] = (W_l h_{l-1}(x_i))_j`` of a hidden layer.
gflow identifies it by ``(layer, neuron, point)``: ``layer`` is the 0-based index into
``params`` of the matrix that produces it (``0 .. k-2``), ``neuron`` the row of that
matrix, ``point`` the row of ``X``. Flattened, all pre-activations form one vector of
length ``P = n * (d_1 + ... + d_{k-1})``, ordered layer-major, then neuron, then point.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "forward",
    "preactivations",
    "relu",
    "xavier_normal",
    "gaussian",
    "uniform_ball",
    "init_params",
]


SMALL_PRODUCT = 16  # multiply-adds up to which one trajectory's products are written out


def relu(z):
    """``max(z, 0)`` with derivative 0 at 0 (the paper's convention ``σ'(0) = 0``)."""
    return jnp.where(z > 0, z, 0.0)


def forward(params, X, slopes=None, held=False, small=SMALL_PRODUCT):
    """Network output and hidden pre-activations.

    Arguments:
        params: ``[W_1, ..., W_k]``, ``W_l`` of shape ``(d_l, d_{l-1})``.
        X: inputs, shape ``(n, d_0)``.
        slopes: optional list of ``k-1`` arrays of shape ``(n, d_l)``. When given, each
            hidden unit computes ``h = slope * p`` instead of ``relu(p)``: with slopes 1
            (active) and 0 (inactive) this is the smooth extension of the network from
            one activation region, whose gradient is the one-sided gradient field; a
            slope in ``(0, 1)`` on a pre-activation held at zero gives the Filippov
            field with that equivalent control.
        held: with ``slopes``, let a unit with a slope other than 0 or 1 (held on its surface)
            output exactly 0 (``h = slope * (p − p)``, the second ``p`` a constant:
            value 0, derivative ``slope * dp``), so that the round-off by which an
            integrated ``p`` misses its surface does not reach the pre-activations
            above it. The gradient field keeps ``h = slope * p`` (``held=False``): with
            it the SPEC §3 invariants hold exactly at every state, surface or not.
        small: multiply-adds up to which a layer's product is written out rather than
            one ``dot`` (:func:`written_out_below`).

    Returns:
        ``(out, pre)``: output of shape ``(n, d_k)`` and the list of ``k-1``
        pre-activation arrays, ``pre[l]`` of shape ``(n, d_{l+1})``.
    """
    h = X
    pre = []
    for layer, W in enumerate(params[:-1]):
        p = _times_transpose(h, W, small)
        pre.append(p)
        if slopes is None:
            h = relu(p)
        else:
            s = slopes[layer]
            h = s * (jnp.where((s != 0) & (s != 1), p - jax.lax.stop_gradient(p), p) if held else p)
    return _times_transpose(h, params[-1], small), pre


def written_out_below(lanes):
    """Multiply-adds up to which the engine writes a product ``h @ W.T`` out (a broadcast
    multiply and a sum, which XLA fuses with its neighbours) rather than one ``dot``,
    for a program of ``lanes`` trajectories side by side (:func:`gflow.simulate_batch`).

    One trajectory (``lanes = 1``): 16, the paper's 2×2 layers at two points. Above,
    one ``dot`` each: written out, the products of a deep program were a quarter of its
    operations (depth 6, width 10, 16 points: it compiled in 42.7 s against 32.8 s, and
    ran 380 iterations in 6.5 s against 5.0 s; 2026-12-06). Several lanes: 256. Under
    ``vmap`` a CPU runs a small ``dot`` as a batched call per product, which costs several
    times the fused loop: ``benchmarks.filippov``'s batches (10 depth-3 and 23 depth-4
    problems, products of 20–150 multiply-adds) ran in 2.7–3.0 s and 8.9–9.6 s with
    256 against 5.2–5.3 s and 17.6–18.1 s with 16, the same iterations and results
    (2026-12-06, this machine's 2 cores)."""
    return SMALL_PRODUCT if lanes == 1 else 256


def _times_transpose(h, W, small=SMALL_PRODUCT):
    """``h @ W.T``: written out up to ``small`` multiply-adds, else one ``dot``
    (:func:`written_out_below`)."""
    if h.shape[0] * h.shape[1] * W.shape[0] > small:
        return h @ W.T
    return jnp.sum(h[:, None, :] * W[None, :, :], axis=-1)


def preactivations(params, X, slopes=None, held=False, small=SMALL_PRODUCT):
    """All hidden pre-activations as one flat vector of length ``P`` (module docstring);
    ``slopes``, ``held`` and ``small`` as in :func:`forward`."""
    _, pre = forward(params, X, slopes, held, small)
    if not pre:
        return jnp.zeros((0,), X.dtype)
    return jnp.concatenate([p.T.reshape(-1) for p in pre])


def layer_blocks(flat, n, hidden_widths):
    """A ``(P,)`` vector in the flat order as one ``(d_l, n)`` block per hidden layer
    (``[neuron, point]``)."""
    out, start = [], 0
    for d in hidden_widths:
        out.append(flat[start : start + d * n].reshape(d, n))
        start += d * n
    return out


def stacked_blocks(flat, n, hidden_widths, fill):
    """A ``(P,)`` vector in the flat order as one ``(L, d, n)`` array, ``[layer, neuron,
    point]``, ``d`` the largest hidden width: a layer's block padded with ``fill`` to
    ``d`` neurons. One reshape where every hidden layer has ``d`` neurons, one gather
    otherwise; work on all layers at once then does not grow the program with the depth
    (:func:`flat_blocks` is the inverse)."""
    tables = _stacked_tables(n, tuple(hidden_widths))
    if tables is None:
        return flat.reshape(len(hidden_widths), -1, n)
    return jnp.append(flat, jnp.asarray(fill, flat.dtype))[tables[0]]


def flat_blocks(stacked, n, hidden_widths):
    """An ``(L, d, n)`` array of :func:`stacked_blocks`'s layout back in the flat order,
    ``(P,)`` (padding dropped)."""
    tables = _stacked_tables(n, tuple(hidden_widths))
    return stacked.reshape(-1) if tables is None else stacked.reshape(-1)[tables[1]]


def per_unit(rows, n, hidden_widths):
    """``(P,)``: each unit's entry of ``rows``, ``(L, n)`` ``[layer, point]`` (a value per
    layer and point, the same for every neuron of the layer)."""
    shape = (len(hidden_widths), max(hidden_widths), n)
    return flat_blocks(jnp.broadcast_to(rows[:, None, :], shape), n, hidden_widths)


@functools.lru_cache(maxsize=64)
def _stacked_tables(n, hidden_widths):
    """For :func:`stacked_blocks` and :func:`flat_blocks`: the ``(L, d, n)`` flat index of
    each entry (``P`` for padding) and each flat index's position in the stacked array,
    or ``None`` where the layers have one width (a reshape)."""
    d, P = max(hidden_widths), n * sum(hidden_widths)
    if min(hidden_widths) == d:
        return None
    layer, neuron, point = index_table(n, hidden_widths)
    table = np.full((len(hidden_widths), d, n), P, np.int32)
    table[layer, neuron, point] = np.arange(P)
    return table, ((layer * d + neuron) * n + point).astype(np.int32)


def unflatten_preactivations(flat, n, hidden_widths):
    """Inverse of the flattening: list of ``(n, d_l)`` arrays from a ``(P,)`` vector."""
    return [block.T for block in layer_blocks(flat, n, hidden_widths)]


def index_table(n, hidden_widths):
    """NumPy arrays ``(layer, neuron, point)`` of length ``P`` for each flat index."""
    layer, neuron, point = [], [], []
    for ell, d in enumerate(hidden_widths):
        j, i = np.meshgrid(np.arange(d), np.arange(n), indexing="ij")
        layer.append(np.full(d * n, ell))
        neuron.append(j.reshape(-1))
        point.append(i.reshape(-1))
    if not layer:
        return (np.zeros(0, int),) * 3
    return tuple(np.concatenate(a).astype(np.int32) for a in (layer, neuron, point))


def _check_widths(widths):
    widths = tuple(int(w) for w in widths)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(
            f"widths: expected a sequence (d_0, d_1, ..., d_k) of at least two positive integers, got {widths!r}"
        )
    return widths


def _batch_shape(batch):
    if batch is None:
        return ()
    if isinstance(batch, int):
        return (batch,)
    return tuple(batch)


def xavier_normal(key, widths: Sequence[int], batch=None):
    """Xavier-normal (Glorot) weights: entries of ``W_l`` are ``N(0, 2/(d_l + d_{l-1}))``.

    This is PyTorch's ``xavier_normal_``, the authors' default. ``batch`` (an int or a
    shape) adds leading batch axes.
    """
    widths = _check_widths(widths)
    keys = jax.random.split(key, len(widths) - 1)
    shape = _batch_shape(batch)
    return [
        jnp.sqrt(2.0 / (fi + fo)) * jax.random.normal(k, shape + (fo, fi), jnp.float64)
        for k, fi, fo in zip(keys, widths[:-1], widths[1:])
    ]


def gaussian(key, widths: Sequence[int], std, batch=None):
    """Independent ``N(0, std_l²)`` entries; ``std`` is one float or one per layer."""
    widths = _check_widths(widths)
    stds = _per_layer(std, len(widths) - 1, "std")
    keys = jax.random.split(key, len(widths) - 1)
    shape = _batch_shape(batch)
    return [
        s * jax.random.normal(k, shape + (fo, fi), jnp.float64)
        for k, s, fi, fo in zip(keys, stds, widths[:-1], widths[1:])
    ]


def uniform_ball(key, widths: Sequence[int], radius, batch=None):
    """Each weight vector (row of ``W_l``, i.e. one neuron's incoming weights) uniform in
    the ``d_{l-1}``-dimensional ball of the given radius (one float or one per layer).

    For the paper's 2x2 layers this is the authors' ``uniform_from_ball``: uniform in a
    disk, radius ``r·sqrt(U)`` and a uniform angle.
    """
    widths = _check_widths(widths)
    radii = _per_layer(radius, len(widths) - 1, "radius")
    keys = jax.random.split(key, len(widths) - 1)
    shape = _batch_shape(batch)
    out = []
    for k, r, fi, fo in zip(keys, radii, widths[:-1], widths[1:]):
        kd, kr = jax.random.split(k)
        g = jax.random.normal(kd, shape + (fo, fi), jnp.float64)
        u = jax.random.uniform(kr, shape + (fo, 1), jnp.float64)
        out.append(r * u ** (1.0 / fi) * g / jnp.linalg.norm(g, axis=-1, keepdims=True))
    return out


def _per_layer(value, k, name):
    values = np.broadcast_to(np.asarray(value, dtype=float), (k,)) if np.ndim(value) == 0 else np.asarray(value, float)
    if values.shape != (k,) or not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(
            f"{name}: expected one non-negative finite float or {k} of them (one per layer), got {value!r}"
        )
    return [float(v) for v in values]


_INITIALISERS = {"xavier_normal": xavier_normal, "gaussian": gaussian, "uniform_ball": uniform_ball}


def init_params(key, widths: Sequence[int], method="xavier_normal", *, batch=None, zero_layers=(), **kwargs):
    """Initial parameters by name, with chosen layers set to zero.

    Arguments:
        key: a ``jax.random`` key.
        widths: ``(d_0, d_1, ..., d_k)``.
        method: ``"xavier_normal"``, ``"gaussian"`` (needs ``std=``) or
            ``"uniform_ball"`` (needs ``radius=``).
        batch: optional int or shape of leading batch axes.
        zero_layers: 0-based indices of layers to set to zero (e.g. ``(1,)`` for the
            paper's ``V(0) = 0``).

    Returns:
        ``[W_1, ..., W_k]`` as float64 arrays.
    """
    if method not in _INITIALISERS:
        raise ValueError(f"method: expected one of {sorted(_INITIALISERS)}, got {method!r}")
    params = _INITIALISERS[method](key, widths, batch=batch, **kwargs)
    for layer in zero_layers:
        if not 0 <= layer < len(params):
            raise ValueError(f"zero_layers: expected indices in [0, {len(params)}), got {tuple(zero_layers)!r}")
        params[layer] = jnp.zeros_like(params[layer])
    return params
