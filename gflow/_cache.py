"""JAX's persistent compilation cache, turned on by the command line.

Most of a first ``gflow demo`` is XLA compiling gflow's programs; the command line keeps
them on disk so that later runs load them instead. The folder is

- ``$GFLOW_CACHE_DIR`` if that is set (``off``, ``0``, ``no`` or ``false`` turn the cache off,
  as does ``gflow --no-cache ...``);
- else ``$XDG_CACHE_HOME/gflow/jax`` if ``XDG_CACHE_HOME`` is set;
- else ``~/.cache/gflow/jax``.

A folder already given to JAX (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config.update("jax_compilation_cache_dir", ...)``) is kept as it is. ``import gflow``
alone never turns the cache on: a library call leaves JAX's configuration to its caller.
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


def enable_compilation_cache(folder: Path | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache in ``folder`` (default
    :func:`default_cache_dir`) for every program, however quickly it compiled; call it
    before the first compilation. Returns the folder in use, ``None`` if the cache is off.
    A folder JAX already has is kept."""
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    folder = default_cache_dir() if folder is None else folder
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
