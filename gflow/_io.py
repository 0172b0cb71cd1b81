"""Atomic file writes: nothing half-written is ever left under the final name."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np


def atomic_write(path, write: Callable, mode="wb"):
    """Write through ``write(file)`` to a temporary file in ``path``'s folder, flush it to
    disk, then rename it onto ``path`` (``os.replace`` is atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _strict(x):
    if isinstance(x, dict):
        return {str(k): _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    if isinstance(x, np.ndarray):
        return _strict(x.tolist())
    if isinstance(x, np.generic):
        return _strict(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path, record):
    """``record`` as strict JSON (NaN and inf as ``null``, NumPy values as Python ones),
    written atomically."""
    text = json.dumps(_strict(record), indent=2, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text), mode="w")
