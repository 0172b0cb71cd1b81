"""The command line's persistent compilation cache (``gflow._cache``): where it is, how it
is turned off, and that a command's programs land in it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gflow._cache import default_cache_dir

# A command, then one compilation in the same process, as `gflow demo` does.
_COMMAND_THEN_COMPILE = """
import sys
import jax, jax.numpy as jnp
from typer.testing import CliRunner
from gflow.cli import app
result = CliRunner().invoke(app, [*sys.argv[1:], "version"])
assert result.exit_code == 0, result.output
jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) * 2.0)(1.0))
print("cache dir:", jax.config.jax_compilation_cache_dir)
"""


@pytest.mark.quick
def test_the_cache_folder_and_how_to_turn_it_off():
    home = Path(os.path.expanduser("~"))
    assert default_cache_dir({}) == home / ".cache" / "gflow" / "jax"
    assert default_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/gflow/jax")
    assert default_cache_dir({"GFLOW_CACHE_DIR": "~/c", "XDG_CACHE_HOME": "/x"}) == home / "c"
    for off in ("off", "OFF", "0", "no", "false", "", " "):
        assert default_cache_dir({"GFLOW_CACHE_DIR": off}) is None, off


def test_a_command_caches_its_programs_unless_told_not_to(tmp_path):
    def run(folder, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
        env["GFLOW_CACHE_DIR"] = str(folder)
        proc = subprocess.run(
            [sys.executable, "-c", _COMMAND_THEN_COMPILE, *args], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    on = tmp_path / "on"
    assert f"cache dir: {on}" in run(on)
    assert any(on.iterdir())  # the program compiled after the command was written
    off = tmp_path / "off"
    assert "cache dir: None" in run(off, "--no-cache")
    assert not off.exists()


# A Python caller: the cache turned on by gflow.enable_compilation_cache, then one simulate.
_PYTHON_CALLER = """
import json, sys
import numpy as np
import gflow
folder = gflow.enable_compilation_cache(sys.argv[1])
params = [np.array([[1.0, -0.5], [0.3, 0.8]]), np.array([[0.7, -1.2]])]
X = np.array([[1.0, 0.2], [-0.4, 1.0], [0.5, -1.0]])
Y = np.array([[0.5], [1.0], [-0.3]])
sol = gflow.simulate(params, X, Y, t1=2.0)
print(json.dumps(dict(folder=str(folder), params=[np.asarray(W).tolist() for W in sol.params])))
"""


def test_python_callers_keep_their_programs_with_enable_compilation_cache(tmp_path):
    folder = tmp_path / "cache"

    def run():
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "GFLOW_CACHE"))}
        proc = subprocess.run(
            [sys.executable, "-c", _PYTHON_CALLER, str(folder)], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1]), sorted(p.name for p in folder.iterdir())

    first, written = run()
    assert first["folder"] == str(folder)
    assert any(name.startswith("jit_run-") for name in written)  # the integrator's program
    second, again = run()
    assert again == written  # every program loaded, none compiled and written anew
    assert second == first  # bit for bit


@pytest.mark.quick
def test_enable_compilation_cache_rejects_a_folder_that_is_not_a_path():
    import gflow

    with pytest.raises(TypeError, match="`folder` must be a str or a path.*got int"):
        gflow.enable_compilation_cache(3)


# `gflow demo` with one traced function of gflow changed (numerically a no-op): a program
# that differs from the demo's, as after an edit of gflow's source.
_EDITED_DEMO = """
import sys
import gflow.flow as flow
norm = flow._theta_norm
flow._theta_norm = lambda x: norm(x) * 1.0
from gflow.cli import app
app(sys.argv[1:], prog_name="gflow")
"""


def test_a_cached_demo_matches_a_compiled_one_and_an_edited_program_misses(tmp_path):
    folder = tmp_path / "cache"

    def demo(name, code=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
        env["GFLOW_CACHE_DIR"] = str(folder)
        head = [sys.executable, "-c", code] if code else [sys.executable, "-m", "gflow.cli"]
        args = ["demo", "--seeds", "2", "--t1", "1", "--out", str(tmp_path / name)]
        proc = subprocess.run([*head, *args], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads((tmp_path / name / "demo.json").read_text()), sorted(folder.glob("jit_run-*"))

    compiled, programs = demo("compiled")  # an empty cache: compiled here, then written
    assert len(programs) == 1  # the demo's one integrator program (table and figure)
    cached, again = demo("cached")
    assert again == programs  # loaded, nothing new written
    assert cached == compiled  # bit for bit: JSON floats round-trip exactly
    edited, after = demo("edited", _EDITED_DEMO)
    assert len(after) == 2 and set(programs) < set(after)  # its own entry, not the stale one
    assert edited == compiled


@pytest.mark.quick
def test_clearing_jax_caches_unmaps_compiled_programs():
    """The suite's per-file fixture (conftest) relies on it: a compiled gflow program holds
    about 1,250 memory mappings of the process (tests/xla_map_count.py), and
    ``jax.clear_caches()`` releases them; counted from /proc/self/maps."""
    import jax

    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps (Linux)")
    from xla_map_count import compile_one, mappings  # tests/ is on the path (conftest's folder)

    jax.clear_caches()
    before = mappings()
    compile_one(7)
    added = mappings() - before
    assert added >= 300, added  # a program's kernels, each mapped on its own
    jax.clear_caches()
    assert mappings() - before <= 0.1 * added, (before, added, mappings())
