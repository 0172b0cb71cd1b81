"""Shared fixtures. Importing gflow turns on float64."""

import jax
import numpy as np
import pytest

import gflow  # noqa: F401  (enables jax_enable_x64)
from gflow.theory import authors_data

assert jax.config.jax_enable_x64


@pytest.fixture(scope="session")
def authors():
    """The authors' two-point data (SPEC §4)."""
    return authors_data()


@pytest.fixture(scope="session")
def authors_xavier():
    """200 Xavier-normal 2-2-2 starts (key 0), as numpy arrays with a leading batch axis."""
    return [np.asarray(W) for W in gflow.init_params(jax.random.PRNGKey(0), (2, 2, 2), batch=200)]


def max_diff(a, b):
    """Largest absolute difference between two lists of arrays."""
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))
