"""JAX's persistent compilation cache: turned on by the command line, and from Python by
:func:`enable_compilation_cache`.

Most of a first ``gflow demo`` is XLA compiling gflow's programs; the command line keeps
them on disk so that later runs load them instead. The folder is

- ``$GFLOW_CACHE_DIR`` if that is set (``off``, ``0``, ``no`` or ``false`` turn the cache off,
  as does ``gflow --no-cache ...``);
- else ``$XDG_CACHE_HOME/gflow/jax`` if ``XDG_CACHE_HOME`` is set;
- else ``~/.cache/gflow/jax``.

A folder already given to JAX (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config.update("jax_compilation_cache_dir", ...)``) is kept as it is. ``import gflow``
alone never turns the cache on: a library call leaves JAX's configuration to its caller,
who turns it on with :func:`enable_compilation_cache`.
The cache is safe to delete at any time; JAX keys each entry on the program, the jax and
jaxlib versions and the compiler options, so an upgrade does not load stale programs.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

ENV = "GFLOW_CACHE_DIR"
_OFF = ("off", "0", "no", "false", "none")


def default_cache_dir(environ=None) -> Path | None:
    """The folder the command line caches compiled programs in, or ``None`` where
    ``GFLOW_CACHE_DIR`` turns the cache off (see the module docstring)."""
    environ = os.environ if environ is None else environ
    given = environ.get(ENV)
    if given is not None:
        return None if given.strip().lower() in _OFF or not given.strip() else Path(given).expanduser()
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gflow" / "jax"


def enable_compilation_cache(folder=None) -> Path | None:
    """Keep gflow's compiled programs on disk, so that a later process loads them instead of
    compiling them again (JAX's persistent compilation cache).

    Each (network shape, loss, options) is one XLA program, compiled on its first call: on a
    2-core CPU from about 10 s for a depth-2 network to about 20–25 s at depth 6
    (``python -m benchmarks.compile_time``). The `gflow` command turns the cache on by
    itself; from Python, call this once, before the first `gflow.simulate`, and every
    program compiled after it is written to the folder and loaded from it by later
    processes that call it too. JAX keys each
    entry on the program, the jax and jaxlib versions and the compiler options, so an edit
    of gflow or an upgrade compiles anew rather than loading a stale program; the folder is
    safe to delete at any time.

    **Arguments:**

    - `folder`: where to keep the programs (`str` or `Path`); default
      `$GFLOW_CACHE_DIR`, else `$XDG_CACHE_HOME/gflow/jax`, else `~/.cache/gflow/jax`
      (`GFLOW_CACHE_DIR=off` turns the default off).

    **Returns:** the folder in use, or `None` where the cache stays off (`GFLOW_CACHE_DIR`
    says so, or the folder cannot be created: then a warning says why). A folder that JAX
    already has (`JAX_COMPILATION_CACHE_DIR`, or `jax.config.update("jax_compilation_cache_dir",
    ...)`) is kept and returned.

    **Example:**

        import gflow
        gflow.enable_compilation_cache()        # ~/.cache/gflow/jax
        sol = gflow.simulate(params, X, Y, t1=10.0)  # compiled once; loaded in later runs
    """
    if folder is not None and not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"`folder` must be a str or a path, or None for the default; got {type(folder).__name__}.")
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    folder = default_cache_dir() if folder is None else Path(folder).expanduser()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # e.g. a read-only home: run without the cache rather than fail
        warnings.warn(f"gflow: no compilation cache ({e}); set {ENV} to a writable folder or to off", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # JAX's defaults skip programs that compiled in under 1 s; gflow's many small ones add up.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
