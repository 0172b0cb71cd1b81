"""Training losses of SPEC §1 as JAX functions of the network output.

Each loss maps ``(out, Y)`` to a scalar: ``out`` of shape ``(n, d_out)``; ``Y`` of shape
``(n, d_out)`` for regression losses, ``(n,)`` of ``±1`` labels for classification
losses (with ``d_out = 1``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .networks import SMALL_PRODUCT, forward

__all__ = ["LOSSES", "CLASSIFICATION", "square", "mse", "exponential", "logistic", "objective"]


def square(out, Y):
    """The paper's square loss ``½ Σ_i ‖N(x_i) − y_i‖²``."""
    return 0.5 * jnp.sum((out - Y) ** 2)


def mse(out, Y):
    """Mean squared error over all ``n·d_out`` entries (PyTorch's ``MSELoss``), ``= 2L/(n·d_out)``."""
    return jnp.mean((out - Y) ** 2)


def _margins(out, Y):
    return Y * out[:, 0]


def exponential(out, Y):
    """``(1/n) Σ_i exp(−y_i N(x_i))``. Large margins underflow to an exact 0 gradient
    contribution, never to inf or NaN."""
    return jnp.mean(jnp.exp(-_margins(out, Y)))


def logistic(out, Y):
    """``(1/n) Σ_i log(1 + exp(−y_i N(x_i)))``, evaluated as ``logaddexp(0, −q)``, which
    is stable for margins of either sign."""
    return jnp.mean(jnp.logaddexp(0.0, -_margins(out, Y)))


LOSSES = {"square": square, "mse": mse, "exponential": exponential, "logistic": logistic}
CLASSIFICATION = frozenset({"exponential", "logistic"})


def objective(loss: str, small: int = SMALL_PRODUCT):
    """The function ``(params, X, Y, weight_decay, slopes) ↦ L(θ) + (λ/2)‖θ‖²``.

    ``slopes`` is passed to :func:`gflow.networks.forward`: ``None`` gives the network
    with true ReLUs; a list of per-pre-activation slopes gives the smooth extension from
    one activation region, whose gradient is that region's one-sided field. ``small``:
    as in :func:`gflow.networks.forward`.
    """
    fn = LOSSES[loss]

    def value(params, X, Y, weight_decay=0.0, slopes=None):
        out, _ = forward(params, X, slopes, small=small)
        sq = sum(jnp.sum(W**2) for W in jax.tree.leaves(params))
        return fn(out, Y) + 0.5 * weight_decay * sq

    return value
