"""The command line's persistent compilation cache (``gflow._cache``): where it is, how it
is turned off, and that a command's programs land in it."""

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
