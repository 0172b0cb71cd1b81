"""Shared fixtures. Importing gflow turns on float64."""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import jax
import numpy as np
import pytest

import gflow  # (enables jax_enable_x64)
from gflow.regions import unit_gaps
from gflow.theory import authors_data

assert jax.config.jax_enable_x64
# The command line's compilation cache (gflow._cache) stays off in the tests and the
# processes they start, so that no test writes into the user's ~/.cache.
os.environ["GFLOW_CACHE_DIR"] = "off"


def share_compilation_cache():
    """Keep JAX's persistent compilation cache in a fresh temporary folder for this process
    and the processes it starts (notebooks, benchmarks), removed at exit: a notebook that
    runs an experiment its test file also runs compiles the programs once between them.
    Called at import by the test files that start such processes; not everywhere, since
    writing each compiled program costs about 2 s (2-2-2 programs: 15.9 s mean against
    14.0 s without, `/tmp` script)."""
    folder = tempfile.mkdtemp(prefix="gflow-test-jax-cache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    jax.config.update("jax_compilation_cache_dir", folder)


@pytest.fixture(scope="module", autouse=True)
def _drop_compiled_programs():
    """Each test file's compiled programs are dropped when it ends: every program keeps
    about 1,250 memory mappings (XLA:CPU maps each kernel on its own) and Linux allows
    65,530 per process, so one process running the whole suite used to die inside XLA's
    compiler after about fifty programs (``tests/xla_map_count.py``)."""
    yield
    jax.clear_caches()


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
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


def assert_modes_on_their_sides(sol, X, band=1e-9):
    """Every member's final modes (one solution or a batch) against its pre-activations
    recomputed in NumPy from the final weights (:func:`gflow.regions.unit_gaps`, itself
    checked in ``test_regions``): active units at ``p ≥ −band``, inactive at ``p ≤ band``,
    sliding within ``band`` of 0. (A sliding unit whose control did not zero its rate
    drifted off its surface while it slid and then left to the wrong side: inactive at
    ``p = +1.7e-3``.)"""
    batch = np.ndim(sol.final_modes) == 2
    for b in range(len(sol.status) if batch else 1):
        Xb = X[b] if np.ndim(X) == 3 else X
        params = [np.asarray(W[b] if batch else W) for W in sol.params]
        gaps = unit_gaps(sol.final_modes[b] if batch else sol.final_modes, params, Xb)
        assert np.all(gaps <= band), (b, float(np.max(gaps)))


def assert_energy_identity(sol, params0, X, Y, loss="square", weight_decay=0.0, rel=1e-8, members=None):
    """The energy identity ``L(θ(0)) − L(θ(t)) = ∫₀ᵗ ‖θ̇‖²`` of every member of ``sol`` (one
    solution or a batch, started from ``params0``; ``X``, ``Y`` shared or one per member;
    ``weight_decay`` a float or one per member), at the end and at every save time: the
    engine's integral (``sol.energy``, ``sol.saved_energy``) against losses recomputed in
    NumPy (:func:`gflow.reference.loss_value`) from the initial, final and saved weights,
    relative to the loss dissipated by then (at least 1e-12 of the initial loss); only
    ``members`` of a batch if given. Returns the largest relative defect."""
    from gflow.reference import loss_value

    batch = np.ndim(sol.energy) == 1
    count = len(sol.status) if batch else 1
    worst = 0.0
    for b in range(count) if members is None else members:
        m = sol[b] if batch else sol
        Xb, Yb = (X[b], Y[b]) if np.ndim(X) == 3 else (X, Y)
        wd = float(np.broadcast_to(weight_decay, (count,))[b])
        start = [np.asarray(W[b] if batch else W) for W in params0]
        L0 = loss_value(start, Xb, Yb, loss=loss, weight_decay=wd)
        assert abs(L0 - float(m.initial_loss)) <= 1e-12 * max(abs(L0), 1.0), (b, L0, m.initial_loss)
        points = [(m.params, float(m.energy))]
        points += [([W[s] for W in m.ys], float(m.saved_energy[s])) for s in range(len(m.ts))]
        for params, E in points:
            if not np.isfinite(E):  # a save time after an early stop
                continue
            drop = L0 - loss_value([np.asarray(W) for W in params], Xb, Yb, loss=loss, weight_decay=wd)
            defect = abs(drop - E) / max(abs(drop), E, 1e-12 * abs(L0), 1e-300)
            worst = max(worst, defect)
            assert defect <= rel, (b, drop, E, defect)
    return worst


_RUN_NOTEBOOK = """
import sys, time, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
start = time.perf_counter()
NotebookClient(nb, timeout=float(sys.argv[3]), kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
print(f"notebook executed in {time.perf_counter() - start:.1f} s")
"""


def start_notebook(path, cwd, cell_timeout):
    """Execute a notebook in a subprocess (nbclient, kernel python3, working folder ``cwd``,
    Matplotlib's Agg backend) while other tests run; see :func:`finish_notebook`."""
    return subprocess.Popen(
        [sys.executable, "-c", _RUN_NOTEBOOK, str(path), str(cwd), str(cell_timeout)],
        cwd=cwd, env=dict(os.environ, MPLBACKEND="Agg"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish_notebook(proc, path, timeout):
    """Wait for :func:`start_notebook`'s process and check that every cell ran."""
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{path.name} did not finish within {timeout} s")
    assert proc.returncode == 0, output[-4000:]
    assert "notebook executed" in output


def stop_notebook(proc):
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
