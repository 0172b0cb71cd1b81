"""Benchmarks of gflow against other integrators. Run each as ``python -m benchmarks.<name>``.

- :mod:`benchmarks.engine`: throughput of :func:`gflow.simulate_batch` against the SciPy
  reference :func:`gflow.reference.scipy_flow`, and their agreement, on the authors'
  two-point problem.

Timing thresholds live here, never in the unit tests.
"""
