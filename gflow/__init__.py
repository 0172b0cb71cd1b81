"""gflow: exact gradient flow of bias-free ReLU networks.

An adaptive Diffrax solver integrates ``dθ/dt = −∇L(θ)`` region by region, stopping at
every ReLU kink; crossings, sliding and each neuron's regions are recorded.
"""

import jax

jax.config.update("jax_enable_x64", True)

from importlib.metadata import PackageNotFoundError, version  # noqa: E402

from ._cache import enable_compilation_cache  # noqa: E402
from .events import Kind  # noqa: E402
from .networks import forward, gaussian, init_params, uniform_ball, xavier_normal  # noqa: E402
from .solution import Crossings, Solution, Status  # noqa: E402
from .solve import simulate, simulate_batch  # noqa: E402

try:
    __version__ = version("gflow")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = [
    "Crossings",
    "Kind",
    "Solution",
    "Status",
    "enable_compilation_cache",
    "forward",
    "gaussian",
    "init_params",
    "simulate",
    "simulate_batch",
    "uniform_ball",
    "xavier_normal",
]
