"""Sweeps: many exact gradient-flow trajectories of one network and data set, split into
resumable chunks, run across the local devices and across several processes.

A sweep is a config (a dict, or a JSON / TOML file read by :func:`load_config`;
:func:`check_config` lists every key)::

    {"widths": [2, 2, 2], "init": "xavier_normal", "data": "authors", "t1": 150.0,
     "trajectories": 100000, "chunk": 1024, "seed": 0, "out": "results/sweep"}

Trajectory ``i`` starts from ``init_params(fold_in(PRNGKey(seed), i), widths, ...)``: its
start depends on ``(seed, i)`` only, never on the chunk, the devices or the process that
integrates it. Chunk ``k`` holds trajectories ``[k·chunk, (k+1)·chunk)``; it is one
:func:`gflow.simulate_batch` call over the local devices (the last chunk is padded, so
every chunk reuses one compiled program).

Files under ``out``::

    chunks/chunk_00000.npz  one finished chunk: per-trajectory arrays, its provenance
                            (process, host, devices, seconds), a SHA-256 of its contents
                            and a fingerprint of the config; written atomically
    results.npz             every chunk, concatenated in trajectory order (process 0)
    record.json             config, fingerprint, seed, package versions, where the chunks
                            were computed, a summary

Restart. A rerun skips every chunk whose file loads and matches its checksum, fingerprint
and rows, and recomputes the others (missing, truncated, altered, from another config or
another gflow version). Killing a sweep at any moment loses only the chunks in flight: a
chunk file is either complete or absent (temporary file, then ``os.replace``), and the
merged result of the rerun is the same, bit for bit, as an uninterrupted run's on the same
devices.

Several processes (one per host, say, on a shared file system): chunk ``k`` belongs to
process ``k % count``; each process computes its own chunks, and process 0 then waits for
the others' files (``wait`` seconds) and merges. ``gflow sweep CONFIG --merge-only`` merges
later from the files alone. ``process_index`` / ``process_count`` default to
``jax.process_index()`` / ``jax.process_count()``, which ``jax.distributed.initialize``
sets; see the README for the launch.

Reproducibility across devices. :func:`gflow.simulate_batch` gives each device
``min(lanes, shard)`` lanes (powers of two), where a shard is ``chunk / devices``
trajectories. Its integration loop works on arrays of ``lanes`` trajectories (the shard
size only sets the queue), so a trajectory's arithmetic depends on the lane count, not on
the shard. With ``chunk ≥
devices · lanes`` (the defaults, 1024 and 16, allow 64 devices) every trajectory (final
weights, time, status, events, modes, step counts) is the same, bit for bit, on 1, 2 or 4
devices. The final loss and gradient norm are evaluated after the integration by one
vectorised call over each device's shard, whose compiled code depends on the shard size:
across device counts they may differ in the last bit (at most 3.2e-16 relative, measured
on 1024 trajectories). A rerun on the same devices reproduces every array bit for bit.
Each chunk records its devices and lanes.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import time
from collections import Counter
from pathlib import Path

import jax
import numpy as np

from . import theory
from ._chunks import _CHUNK_NAME, _fingerprint, _load_npz, _save_npz, _versions
from ._io import write_json
from .events import Kind
from .flow import _SOLVERS
from .losses import CLASSIFICATION, LOSSES
from .networks import _per_layer, init_params
from .solution import Status
from .solve import simulate_batch

__all__ = ["DEFAULTS", "check_config", "load", "load_config", "run", "summarise"]

REQUIRED = ("widths", "t1", "trajectories")
DEFAULTS = dict(
    init="xavier_normal",
    data="authors",
    loss="square",
    rtol=1e-8,
    atol=1e-10,
    motion_tol=None,
    weight_decay=0.0,
    gtol=None,
    ltol=None,
    dtol=None,
    events="stop",
    solver="dopri8",
    max_steps=100_000,
    max_events=None,
    max_sliding=None,
    lanes=16,
    chunk=1024,
    seed=0,
    out=None,
)
"""Every optional key of a sweep config and its default (see :func:`check_config`)."""

_INIT_ARGS = {"xavier_normal": (), "gaussian": ("std",), "uniform_ball": ("radius",)}


# ----------------------------------------------------------------------------- config


def check_config(config: dict) -> dict:
    """A sweep config, checked and completed with :data:`DEFAULTS`.

    Keys (``widths``, ``t1`` and ``trajectories`` are required):

    ================  ======================================================================
    ``widths``        ``[d_0, d_1, ..., d_k]``, ``k ≥ 2``
    ``init``          ``"xavier_normal"``, or ``{"method": "gaussian", "std": s}``,
                      ``{"method": "uniform_ball", "radius": r}`` (``s``, ``r`` one float
                      or one per layer); optional ``"zero_layers": [...]`` in the dict form
    ``data``          ``"authors"`` (:func:`gflow.theory.authors_data`);
                      ``{"kind": "gaussian", "n": n, "seed": s}`` (entries of ``X`` and
                      ``Y`` i.i.d. ``N(0, 1)``; ``±1`` labels with probability ½ for
                      classification losses); or ``{"X": [[...]], "Y": [...]}``
    ``loss``          ``"square"``, ``"mse"``, ``"exponential"``, ``"logistic"``
    ``t1``            final time, > 0 (``"inf"`` with ``gtol``, ``ltol`` or ``dtol``)
    ``rtol, atol``    step-controller tolerances (defaults 1e-8, 1e-10)
    ``motion_tol``    optional, as in :func:`gflow.simulate`
    ``weight_decay``  ``λ ≥ 0``
    ``gtol, ltol,     optional stopping criteria, as in :func:`gflow.simulate`
    dtol``
    ``events, solver, as in :func:`gflow.simulate` (``max_events``, ``max_sliding``:
    max_steps,        ``null`` for the engine's defaults)
    max_events,
    max_sliding``
    ``lanes``         lanes per device (default 16)
    ``trajectories``  number of trajectories
    ``chunk``         trajectories per chunk file and per compiled batch call (default
                      1024); several times ``devices · lanes`` keeps the lanes busy
    ``seed``          master ``jax.random`` seed, ``0 ≤ seed < 2**31``
    ``out``           output folder (relative to the working directory)
    ================  ======================================================================

    Returns:
        A new dict with every key, in normal form (``init`` and ``data`` as dicts; floats
        as floats; ``t1 = "inf"`` when infinite), JSON-serialisable.

    Raises:
        ValueError: naming the key, what was given and what was expected.
    """
    if not isinstance(config, dict):
        raise ValueError(f"config: expected a mapping of keys to values, got {type(config).__name__}")
    known = REQUIRED + tuple(DEFAULTS)
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise ValueError(f"config: unknown key {unknown[0]!r}; expected keys among {sorted(known)}")
    for key in REQUIRED:
        if key not in config:
            raise ValueError(f"{key}: required key missing from the config")
    c = {**DEFAULTS, **config}
    out = dict(widths=_widths(c["widths"]))
    out["loss"] = _choice("loss", c["loss"], sorted(LOSSES))
    out["init"] = _init(c["init"], out["widths"])
    out["data"] = _data_spec(c["data"], out["widths"], out["loss"])
    stops = {k: _optional_positive(k, c[k]) for k in ("gtol", "ltol", "dtol")}
    out["t1"] = _t1(c["t1"], any(v is not None for v in stops.values()))
    out["rtol"] = _positive("rtol", c["rtol"])
    if out["rtol"] >= 1:
        raise ValueError(f"rtol: expected a float in (0, 1), got {c['rtol']!r}")
    out["atol"] = _positive("atol", c["atol"])
    out["motion_tol"] = _optional_positive("motion_tol", c["motion_tol"])
    out["weight_decay"] = _float("weight_decay", c["weight_decay"], ">= 0", lambda v: v >= 0)
    out.update(stops)
    out["events"] = _choice("events", c["events"], ["stop", "through"])
    out["solver"] = _choice("solver", c["solver"], sorted(_SOLVERS))
    out["max_steps"] = _int("max_steps", c["max_steps"])
    out["max_events"] = None if c["max_events"] is None else _int("max_events", c["max_events"])
    out["max_sliding"] = None if c["max_sliding"] is None else _int("max_sliding", c["max_sliding"])
    out["lanes"] = _int("lanes", c["lanes"])
    out["trajectories"] = _int("trajectories", c["trajectories"], high=2**31)
    out["chunk"] = _int("chunk", c["chunk"])
    out["seed"] = _int("seed", c["seed"], low=0, high=2**31)
    if c["out"] is not None and not isinstance(c["out"], (str, os.PathLike)):
        raise ValueError(f"out: expected a folder path, got {c['out']!r}")
    out["out"] = None if c["out"] is None else str(c["out"])
    return out


def load_config(path, **overrides) -> dict:
    """Read a sweep config from a ``.json`` or ``.toml`` file (keys of
    :func:`check_config`), apply ``overrides`` (e.g. ``out=...``) and check it.

    Raises:
        ValueError: if the file cannot be read or parsed, or the config is invalid; the
            message starts with the file's path.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".toml":
            import tomllib  # Python >= 3.11

            raw = tomllib.loads(text)
        else:
            raw = json.loads(text)
    except ImportError:
        raise ValueError(f"{path}: TOML configs need Python >= 3.11 (tomllib); use JSON") from None
    except (OSError, ValueError) as e:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise ValueError(f"{path}: expected a readable JSON or TOML sweep config ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object of config keys, got {type(raw).__name__}")
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return check_config(raw)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _int(key, value, low=1, high=None):
    bad = isinstance(value, bool) or not isinstance(value, (int, np.integer))
    if bad or value < low or (high is not None and value >= high):
        span = f"an integer >= {low}" + ("" if high is None else f" and < {high}")
        raise ValueError(f"{key}: expected {span}, got {value!r}")
    return int(value)


def _float(key, value, what, ok, allow_inf=False):
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if math.isnan(v) or (math.isinf(v) and not allow_inf) or not ok(v):
        raise ValueError(f"{key}: expected a finite float {what}, got {value!r}")
    return v


def _positive(key, value):
    return _float(key, value, "> 0", lambda v: v > 0)


def _optional_positive(key, value):
    return None if value is None else _positive(key, value)


def _t1(value, may_be_inf):
    v = _float("t1", value, "> 0" + (" (or 'inf')" if may_be_inf else ""), lambda v: v > 0, allow_inf=True)
    if math.isinf(v) and not may_be_inf:
        raise ValueError(f"t1: expected a finite float > 0 ('inf' only with gtol, ltol or dtol), got {value!r}")
    return "inf" if math.isinf(v) else v


def _choice(key, value, options):
    if value not in options:
        raise ValueError(f"{key}: expected one of {options}, got {value!r}")
    return value


def _widths(value):
    ok = isinstance(value, (list, tuple)) and len(value) >= 3
    if not ok or any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1 for w in value):
        raise ValueError(f"widths: expected a list [d_0, d_1, ..., d_k] of k + 1 >= 3 positive integers, got {value!r}")
    return [int(w) for w in value]


def _init(value, widths):
    spec = {"method": value} if isinstance(value, str) else value
    if not isinstance(spec, dict) or spec.get("method") not in _INIT_ARGS:
        raise ValueError(
            f"init: expected one of {sorted(_INIT_ARGS)} or a dict {{'method': ..., <its arguments>}}, got {value!r}"
        )
    method = spec["method"]
    allowed = {"method", "zero_layers", *_INIT_ARGS[method]}
    extra = sorted(set(spec) - allowed)
    missing = [a for a in _INIT_ARGS[method] if a not in spec]
    if extra or missing:
        raise ValueError(
            f"init: {method!r} takes the keys {sorted(allowed - {'method'})}"
            f"{' (' + ', '.join(missing) + ' required)' if missing else ''}, got {value!r}"
        )
    out = {"method": method}
    for arg in _INIT_ARGS[method]:
        v = spec[arg]
        try:  # the initialiser's own check
            _per_layer(v, len(widths) - 1, arg)
        except (TypeError, ValueError):
            raise ValueError(
                f"init: {arg}: expected one finite float >= 0 or {len(widths) - 1} of them (one per layer), got {v!r}"
            ) from None
        out[arg] = [float(x) for x in v] if isinstance(v, (list, tuple)) else float(v)
    zero = spec.get("zero_layers", [])
    layers = range(len(widths) - 1)
    if not isinstance(zero, (list, tuple)) or any(isinstance(z, bool) or z not in layers for z in zero):
        raise ValueError(f"init: zero_layers: expected a list of layer indices in [0, {len(layers)}), got {zero!r}")
    out["zero_layers"] = [int(z) for z in zero]
    return out


def _data_spec(value, widths, loss):
    classify = loss in CLASSIFICATION
    d_in, d_out = widths[0], widths[-1]
    if value == "authors" or value == {"kind": "authors"}:
        if (d_in, d_out) != (2, 2) or classify:
            raise ValueError(
                f"data: 'authors' is two points in R^2 with targets in R^2: expected widths [2, ..., 2] and a "
                f"regression loss, got widths {widths} and loss {loss!r}"
            )
        return {"kind": "authors"}
    if isinstance(value, dict) and value.get("kind") == "gaussian":
        if set(value) != {"kind", "n", "seed"}:
            raise ValueError(f"data: expected {{'kind': 'gaussian', 'n': ..., 'seed': ...}}, got {value!r}")
        return {"kind": "gaussian", "n": _int("data.n", value["n"]), "seed": _int("data.seed", value["seed"], low=0)}
    if isinstance(value, dict) and set(value) - {"kind"} == {"X", "Y"} and value.get("kind", "explicit") == "explicit":
        try:
            X = np.asarray(value["X"], dtype=np.float64)
            Y = np.asarray(value["Y"], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"data: expected numeric lists X and Y, got {value!r}") from None
        if X.ndim != 2 or X.shape[1] != d_in or not np.all(np.isfinite(X)):
            raise ValueError(f"data.X: expected finite values of shape (n, {d_in}), got shape {X.shape}")
        if classify:
            Y = Y.reshape(-1) if Y.ndim == 2 and Y.shape[1] == 1 else Y
            if d_out != 1 or Y.shape != (X.shape[0],) or not np.all(np.isin(Y, (-1.0, 1.0))):
                raise ValueError(
                    f"data.Y: expected {X.shape[0]} labels in {{-1, +1}} (and widths ending in 1) for loss "
                    f"{loss!r}, got shape {Y.shape} with widths {widths}"
                )
        elif Y.shape != (X.shape[0], d_out) or not np.all(np.isfinite(Y)):
            raise ValueError(f"data.Y: expected finite values of shape ({X.shape[0]}, {d_out}), got shape {Y.shape}")
        return {"kind": "explicit", "X": X.tolist(), "Y": Y.tolist()}
    raise ValueError(
        "data: expected 'authors', {'kind': 'gaussian', 'n': ..., 'seed': ...} or {'X': [[...]], 'Y': [...]}, "
        f"got {value!r}"
    )


# ----------------------------------------------------------------------------- problem


def _data(cfg):
    """``(X, Y)`` of a checked config, as float64 NumPy arrays."""
    spec, widths = cfg["data"], cfg["widths"]
    if spec["kind"] == "authors":
        return theory.authors_data()
    if spec["kind"] == "explicit":
        return np.asarray(spec["X"], np.float64), np.asarray(spec["Y"], np.float64)
    k_x, k_y = jax.random.split(jax.random.PRNGKey(spec["seed"]))
    X = np.asarray(jax.random.normal(k_x, (spec["n"], widths[0]), np.float64))
    if cfg["loss"] in CLASSIFICATION:
        return X, np.where(np.asarray(jax.random.bernoulli(k_y, 0.5, (spec["n"],))), 1.0, -1.0)
    return X, np.asarray(jax.random.normal(k_y, (spec["n"], widths[-1]), np.float64))


def _initial(cfg, indices):
    """Initial parameters of trajectories ``indices``: ``[W_1, ..., W_k]`` with a leading
    axis, row ``b`` from ``fold_in(PRNGKey(seed), indices[b])`` only.

    Run primitive by primitive (not under ``jit``), which gives the same bits as
    :func:`gflow.init_params` called on that one key, whatever the number of indices."""
    spec = dict(cfg["init"])
    method, zero = spec.pop("method"), spec.pop("zero_layers")
    key = jax.random.PRNGKey(cfg["seed"])

    def one(i):
        return init_params(jax.random.fold_in(key, i), cfg["widths"], method, zero_layers=zero, **spec)

    return [np.asarray(W, dtype=np.float64) for W in jax.vmap(one)(np.asarray(indices, dtype=np.uint32))]


def _flow_options(cfg):
    kw = {k: cfg[k] for k in ("loss", "rtol", "atol", "weight_decay", "solver", "max_steps", "lanes")}
    kw["t1"] = float(cfg["t1"])
    for key in ("gtol", "ltol", "dtol", "motion_tol", "max_events", "max_sliding"):
        if cfg[key] is not None:  # passed only when set, so the engine's defaults apply otherwise
            kw[key] = cfg[key]
    if cfg["events"] != "stop":
        kw["events"] = cfg["events"]
    return kw


def _bucket(b):
    return 1 << max(b - 1, 0).bit_length()


def _compute(cfg, X, Y, start, stop, devices):
    """Per-trajectory arrays of trajectories ``[start, stop)``."""
    B, chunk = stop - start, cfg["chunk"]
    idx = np.minimum(np.arange(start, start + chunk), stop - 1)  # pad to `chunk`: one compiled program for all
    init = _initial(cfg, idx)
    sol = simulate_batch(init, X, Y, devices=devices, **_flow_options(cfg))
    kinds = np.asarray(sol.crossings.kind)[:B]
    arrays = dict(index=np.arange(start, stop, dtype=np.int64))
    for layer, (W0, W) in enumerate(zip(init, sol.params)):
        arrays[f"init_{layer}"] = W0[:B]
        arrays[f"params_{layer}"] = np.asarray(W, np.float64)[:B]
    arrays.update(
        status=np.asarray(sol.status, np.int32)[:B],
        t=np.asarray(sol.t, np.float64)[:B],
        loss=np.asarray(sol.loss, np.float64)[:B],
        grad_norm=np.asarray(sol.grad_norm, np.float64)[:B],
        energy=np.asarray(sol.energy, np.float64)[:B],
        energy_defect=np.asarray(sol.energy_defect, np.float64)[:B],
        initial_modes=np.asarray(sol.initial_modes, np.int8)[:B],
        final_modes=np.asarray(sol.final_modes, np.int8)[:B],
    )
    for name, value in sol.stats.items():  # counts (int32), the tolerance factor and surface_jump (float64)
        arrays[name] = np.asarray(value)[:B]
    for kind in Kind:  # events of each kind among the recorded ones (the first max_events)
        arrays[f"n_{kind.name.lower()}"] = np.sum(kinds == kind, axis=1).astype(np.int32)
    return arrays


# ----------------------------------------------------------------------------- running


def _bounds(cfg):
    n, chunk = cfg["trajectories"], cfg["chunk"]
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


def _load_chunk(path, fingerprint, start, stop):
    """``(arrays, provenance)`` of a valid chunk file for ``[start, stop)``, else ``None``."""
    arrays = _load_npz(path, fingerprint)
    if arrays is None or "provenance" not in arrays:
        return None
    try:
        provenance = json.loads(str(arrays.pop("provenance")))
    except ValueError:
        return None
    if any(np.ndim(v) == 0 or len(v) != stop - start for v in arrays.values()):
        return None
    if not np.array_equal(arrays.get("index"), np.arange(start, stop)):
        return None
    return arrays, provenance


def _process(index, count):
    if index is None and count is None:
        return jax.process_index(), jax.process_count()
    if index is None or count is None:
        raise ValueError(f"process_index, process_count: expected both or neither, got {index!r} and {count!r}")
    count = _int("process_count", count)
    return _int("process_index", index, low=0, high=count), count


def _device_list(devices):
    local = jax.local_devices()
    if devices is None:
        return local
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        return local[: int(devices)]
    return list(devices)


def run(
    config,
    *,
    devices=None,
    process_index=None,
    process_count=None,
    compute=True,
    merge=True,
    wait=0.0,
    poll=2.0,
    progress=None,
) -> dict:
    """Run a sweep: compute this process's missing chunks, then (process 0) merge.

    Arguments:
        config: a config dict (:func:`check_config`) with ``out`` set.
        devices: passed to :func:`gflow.simulate_batch` (``None``: every local device).
        process_index, process_count: this process and how many there are (default:
            ``jax.process_index()``, ``jax.process_count()``). Chunk ``k`` belongs to
            process ``k % process_count``.
        compute: ``False`` computes nothing and only merges (``--merge-only``).
        merge: whether process 0 merges after its own chunks.
        wait: seconds process 0 waits for the other processes' chunk files, checking
            every ``poll`` seconds.
        progress: optional callable ``(stage, done, total)``: stage ``"chunks"`` after each
            of this process's chunks; ``"merge"`` with the number of chunks ready.

    Returns:
        A dict: ``config`` (checked), ``arrays`` (merged, one row per trajectory, or
        ``None`` where this call did not merge), ``record`` (what ``record.json`` holds,
        or ``None``), ``chunks`` (this call: ``total``, ``owned``, ``computed``,
        ``reused``, ``seconds`` spent computing, ``trajectories`` computed).

    Raises:
        TimeoutError: when merging, if chunks are still missing after ``wait`` seconds
            (the message lists them; a later merge-only call can finish the job).
    """
    t_start = time.perf_counter()
    cfg = check_config(config)
    if cfg["out"] is None:
        raise ValueError("out: expected an output folder in the config, got None")
    index, count = _process(process_index, process_count)
    out = Path(cfg["out"])
    fp = _fingerprint("sweep", {k: v for k, v in cfg.items() if k != "out"})
    bounds = _bounds(cfg)
    paths = [out / "chunks" / _CHUNK_NAME.format(k) for k in range(len(bounds))]
    mine = [k for k in range(len(bounds)) if k % count == index] if compute else []
    found, data = {}, None
    stats = dict(total=len(bounds), owned=len(mine), computed=0, reused=0, seconds=0.0, trajectories=0)
    for i, k in enumerate(mine):
        start, stop = bounds[k]
        got = _load_chunk(paths[k], fp, start, stop)
        if got is None:
            data = data or _data(cfg)
            used = _device_list(devices)
            t0 = time.perf_counter()
            arrays = _compute(cfg, *data, start, stop, used)
            seconds = time.perf_counter() - t0
            per = _bucket(-(-cfg["chunk"] // len(used)))
            provenance = dict(
                chunk=k, start=start, stop=stop, process_index=index, process_count=count, host=platform.node(),
                pid=os.getpid(), devices=[str(d) for d in used], lanes_per_device=_bucket(min(per, cfg["lanes"])),
                seconds=round(seconds, 4), finished=_now(),
            )  # fmt: skip
            _save_npz(paths[k], {**arrays, "provenance": np.array(json.dumps(provenance))}, fp)
            got = (arrays, provenance)
            stats.update(computed=stats["computed"] + 1, seconds=stats["seconds"] + seconds)
            stats["trajectories"] += stop - start
        else:
            stats["reused"] += 1
        if index == 0 and merge:
            found[k] = got
        if progress is not None:
            progress("chunks", i + 1, len(mine))
    result = dict(config=cfg, arrays=None, record=None, chunks=stats)
    if index != 0 or not merge:
        return result

    deadline = time.monotonic() + wait
    while True:
        for k in range(len(bounds)):
            if k not in found and (got := _load_chunk(paths[k], fp, *bounds[k])) is not None:
                found[k] = got
        if progress is not None:
            progress("merge", len(found), len(bounds))
        missing = [k for k in range(len(bounds)) if k not in found]
        if not missing:
            break
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"sweep: {len(missing)} of {len(bounds)} chunks missing or invalid after waiting {wait:g} s "
                f"(chunks {_ranges(missing)}, owned by processes {sorted({k % count for k in missing})} of {count}); "
                "rerun those processes, or this sweep, then merge with --merge-only"
            )
        time.sleep(max(0.0, min(poll, deadline - time.monotonic())))

    parts = [found[k][0] for k in range(len(bounds))]
    arrays = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    origin = [found[k][1] for k in range(len(bounds))]
    record = dict(
        sweep="gflow.sweep",
        config=cfg,
        fingerprint=fp,
        seed=cfg["seed"],
        versions=_versions(),
        created=_now(),
        wall_s=round(time.perf_counter() - t_start, 3),
        chunks=dict(
            total=len(bounds),
            computed=stats["computed"],
            reused=stats["reused"],
            from_other_processes=len(bounds) - stats["owned"],
            by_process={str(p): n for p, n in sorted(Counter(o["process_index"] for o in origin).items())},
            hosts=sorted({o["host"] for o in origin}),
            devices=sorted({len(o["devices"]) for o in origin}),
            lanes_per_device=sorted({o["lanes_per_device"] for o in origin}),
            compute_s=round(sum(o["seconds"] for o in origin), 3),
        ),
        summary=summarise(arrays),
    )
    _save_npz(out / "results.npz", arrays, fp)
    write_json(out / "record.json", record)
    for stale in (out / "chunks").glob(".chunk_*.tmp"):  # left by killed writers; every chunk is final now
        stale.unlink(missing_ok=True)
    return dict(result, arrays=arrays, record=record)


def load(folder) -> dict:
    """A merged sweep from ``folder``: ``{"config", "arrays", "record"}``, the arrays
    checked against their SHA-256 and the record's fingerprint.

    Raises:
        ValueError: if ``folder`` holds no complete, intact merged sweep.
    """
    folder = Path(folder)
    try:
        record = json.loads((folder / "record.json").read_text())
        fingerprint, rows = record["fingerprint"], record["config"]["trajectories"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"folder: expected a merged sweep with record.json, got {str(folder)!r} ({e})") from None
    arrays = _load_npz(folder / "results.npz", fingerprint, rows)
    if arrays is None:
        raise ValueError(f"folder: results.npz in {str(folder)!r} is missing, corrupt or from another config")
    return dict(config=record["config"], arrays=arrays, record=record)


def summarise(arrays) -> dict:
    """Headline numbers of merged sweep arrays (JSON-able): statuses, loss, gradient norm,
    the energy identity's relative defect (:attr:`gflow.Solution.energy_defect`), events,
    sliding, steps."""
    status = arrays["status"]

    def spread(a):
        return dict(min=float(np.min(a)), median=float(np.median(a)), max=float(np.max(a)))

    return dict(
        trajectories=int(status.size),
        status={Status(int(s)).name: int(np.sum(status == s)) for s in np.unique(status)},
        success=int(sum(np.sum(status == s) for s in Status if s.success)),
        loss=spread(arrays["loss"]),
        grad_norm=spread(arrays["grad_norm"]),
        energy_defect=spread(arrays["energy_defect"]),
        events=dict(mean=float(np.mean(arrays["num_events"])), max=int(np.max(arrays["num_events"]))),
        slid=int(np.sum(arrays["n_slide_start"] > 0)),
        accepted_steps=dict(mean=float(np.mean(arrays["num_accepted"])), max=int(np.max(arrays["num_accepted"]))),
    )


def _ranges(ks):
    """``[0, 1, 2, 5, 7, 8]`` as ``"0-2, 5, 7-8"``."""
    out, start = [], None
    for i, k in enumerate(ks):
        start = k if start is None else start
        if i + 1 == len(ks) or ks[i + 1] != k + 1:
            out.append(str(k) if k == start else f"{start}-{k}")
            start = None
    return ", ".join(out)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
