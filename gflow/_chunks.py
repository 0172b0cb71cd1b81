"""Chunked, checked result files: the resumable storage of :mod:`gflow.experiments` and
:mod:`gflow.sweep`.

A chunk file is an ``.npz`` of arrays plus two metadata entries: ``__sha256__`` (SHA-256 of
the arrays, names, dtypes and shapes included) and ``__fingerprint__`` (what computed them:
experiment name, config and gflow version). It is written atomically (temporary file, then
``os.replace``), so a reader sees a complete file or none; :func:`_load_npz` rejects
anything missing, truncated, altered or from another config.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

import jax
import numpy as np

from ._io import atomic_write

_CHUNK_NAME = "chunk_{:05d}.npz"
_META = ("__sha256__", "__fingerprint__")


def _digest(arrays: dict) -> str:
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _fingerprint(name: str, config: dict, version: str | None = None) -> str:
    """Identifies the computation: experiment, config and gflow version (a chunk computed by
    another version of the engine is recomputed, not mixed in)."""
    if version is None:
        from . import __version__ as version
    return hashlib.sha256(json.dumps([name, config, version], sort_keys=True).encode()).hexdigest()


def _save_npz(path: Path, arrays: dict, fingerprint: str):
    """Arrays plus their SHA-256 and the config fingerprint, written atomically."""
    payload = {k: np.asarray(v) for k, v in arrays.items()}
    meta = {"__sha256__": np.array(_digest(payload)), "__fingerprint__": np.array(fingerprint)}
    atomic_write(path, lambda f: np.savez(f, **payload, **meta))


def _load_npz(path: Path, fingerprint: str | None = None, rows: int | None = None) -> dict | None:
    """The arrays of a file written by :func:`_save_npz`, or ``None`` if it is missing,
    unreadable, fails its checksum, has another fingerprint or the wrong number of rows."""
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except Exception:  # missing, truncated, not a zip, bad CRC, pickled content, ...
        return None
    if any(k not in data for k in _META):
        return None
    arrays = {k: v for k, v in data.items() if k not in _META}
    if str(data["__sha256__"]) != _digest(arrays):
        return None
    if fingerprint is not None and str(data["__fingerprint__"]) != fingerprint:
        return None
    if rows is not None and any(np.ndim(v) == 0 or len(v) != rows for v in arrays.values()):
        return None
    return arrays


def _versions() -> dict:
    from . import __version__

    out = {"gflow": __version__, "jax": jax.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}
    for name in ("jaxlib", "diffrax", "equinox"):
        try:
            out[name] = __import__(name).__version__
        except (ImportError, AttributeError):
            out[name] = None
    out["x64"] = bool(jax.config.read("jax_enable_x64"))
    out["platform"] = f"{platform.system()} {platform.machine()}; jax backend {jax.default_backend()}"
    return out


def _run_chunks(name, config, n_items, chunk, compute, out, progress):
    """Run ``compute(start, stop) -> dict of arrays`` over ``[0, n_items)`` in chunks,
    reusing valid chunk files under ``out/chunks``. Returns ``(arrays, computed, reused)``."""
    fp = _fingerprint(name, config)
    starts = list(range(0, n_items, chunk))
    parts, computed, reused = [], 0, 0
    for k, start in enumerate(starts):
        stop = min(start + chunk, n_items)
        path = None if out is None else out / "chunks" / _CHUNK_NAME.format(k)
        arrays = None if path is None else _load_npz(path, fp, stop - start)
        if arrays is None:
            arrays = compute(start, stop)
            computed += 1
            if path is not None:
                _save_npz(path, arrays, fp)
        else:
            reused += 1
        parts.append(arrays)
        if progress is not None:
            progress(k + 1, len(starts))
    merged = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    return merged, computed, reused
