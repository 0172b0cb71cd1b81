"""The paper's depth-2 experiments (SPEC §4), one function each, with exact gradient flow.

============  ==========================================================================
``thm1``      Theorem 1 / Lemma 2: constructed zero-loss networks with ``rank W = 1``.
``thm2``      Theorem 2: small initialisations inside the theorem's condition; rank of
              ``W(∞)``, ``σ_min(W(∞))`` and the angle interval, per converged run.
``thm3``      Theorem 3: ``P[E]`` against ``2(θ_x/2π)²`` for several ``θ_x``; the
              ``S_1 × S_2`` starts against the exact limit :func:`gflow.theory.s1_s2_limit`.
``authors``   The authors' 2-2-2 experiment (their data, Xavier-normal, GF time 150,
              runs with MSE < 1e-4 kept), or their ``uniform_ball`` / ``thm3`` initialisers.
============  ==========================================================================

Every trajectory is integrated by :func:`gflow.simulate_batch` (exact gradient flow that
stops at every kink), never by gradient descent. Each function returns a dict::

    name     "thm1" | "thm2" | "thm3" | "authors"
    config   the arguments that determine the result (JSON-able)
    arrays   dict of NumPy arrays, one entry per run along axis 0
    summary  list of table rows (dicts with the same keys): measured next to the paper
    record   provenance: config, seed, versions, wall time, chunks computed / reused

(``authors`` adds ``outcomes``: region sequences and what they led to.)

Resumable output. With ``out=DIR`` the work is split into chunks of ``chunk`` runs; each
finished chunk is written atomically (temporary file + ``os.replace``) to
``DIR/chunks/chunk_00000.npz`` together with a SHA-256 of its arrays and a fingerprint of
the config. A rerun with the same config loads every chunk whose checksum and fingerprint
match and recomputes the others (missing, partial, corrupt, or from another config). All
random inputs are drawn up front from ``seed``, so a chunk computes the same numbers
whether it runs first or after a restart. When all chunks are done, ``DIR/results.npz``
(all arrays) and ``DIR/record.json`` (config, summary, provenance) are written atomically.

Units: the square loss ``L = ½ Σ_i ‖N(x_i) − y_i‖²``; the authors' MSE is ``L/2`` here
(``n·d_out/2 = 2``), and their 3·10⁶ steps of lr 1e-4 on MSE are GF time 150.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from . import theory
from ._chunks import _fingerprint, _load_npz, _run_chunks, _save_npz, _versions
from ._io import atomic_write
from .events import Kind
from .networks import init_params
from .solution import Status
from .solve import simulate, simulate_batch

__all__ = [
    "AUTHORS_INITS",
    "THM3_THETAS",
    "authors",
    "example",
    "load",
    "save_figures",
    "thm1",
    "thm2",
    "thm3",
    "wilson_interval",
]

THM3_THETAS = tuple(float(np.radians(d)) for d in (95.0, 110.0, 125.0, 140.0, 155.0, 170.0))
"""Default angles ``θ_x`` (radians) of :func:`thm3`: 95°, 110°, …, 170°."""

AUTHORS_INITS = ("xavier_normal", "uniform_ball", "thm3")
"""Initialisers of the authors' code: Xavier-normal; ``uniform_from_ball`` (each row of
``W`` and of ``V`` uniform in a disk); ``thm3`` (rows of ``W`` uniform in a disk, ``V = 0``).
Their code passes one ``--init_max_norm`` (default 1e-4) as the disk radius to both."""


# ----------------------------------------------------------------------------- checks


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def _seed(value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**31:
        raise ValueError(f"seed: expected an integer in [0, 2**31), got {value!r}")
    return int(value)


def _positive(name, value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a positive finite float, got {value!r}") from None
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name}: expected a positive finite float, got {value!r}")
    return v


def _out(out):
    if out is None:
        return None
    if not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"out: expected None or a folder path, got {out!r}")
    return Path(out)


def _write_json(path: Path, record: dict):
    text = json.dumps(record, indent=2, default=_jsonable)
    atomic_write(path, lambda f: f.write(text), mode="w")


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _finish(name, config, arrays, summary, out, t_start, computed, reused, extra=None):
    record = dict(
        experiment=name,
        config=config,
        seed=config.get("seed"),
        versions=_versions(),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        wall_s=round(time.perf_counter() - t_start, 3),
        chunks=dict(total=computed + reused, computed=computed, reused=reused),
        summary=summary,
    )
    result = dict(name=name, config=config, arrays=arrays, summary=summary, record=record)
    if extra:
        record.update(extra)
        result.update(extra)
    if out is not None:
        _save_npz(out / "results.npz", arrays, _fingerprint(name, config))
        _write_json(out / "record.json", record)
    return result


def load(folder) -> dict:
    """A finished experiment from ``folder``: ``{"name", "config", "arrays", "summary",
    "record"}`` (plus ``"outcomes"`` for ``authors``), arrays checked against their SHA-256.

    Raises:
        ValueError: if ``folder`` holds no complete, intact result.
    """
    folder = Path(folder)
    try:
        record = json.loads((folder / "record.json").read_text())
        fingerprint = _fingerprint(record["experiment"], record["config"], record["versions"]["gflow"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"folder: expected a finished experiment with record.json, got {str(folder)!r} ({e})"
        ) from None
    arrays = _load_npz(folder / "results.npz", fingerprint)
    if arrays is None:
        raise ValueError(f"folder: results.npz in {str(folder)!r} is missing, corrupt or from another config")
    out = dict(
        name=record["experiment"], config=record["config"], arrays=arrays, summary=record["summary"], record=record
    )
    for extra in ("outcomes", "teacher", "ts"):  # authors; thm4 / thm5 (gflow.experiments_deep)
        if extra in record:
            out[extra] = record[extra]
    return out


# -------------------------------------------------------------------------- helpers


def wilson_interval(successes, n, z=1.959963984540054):
    """Wilson score interval ``(lo, hi)`` for a binomial proportion (95% by default)."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return float(max(centre - half, 0.0)), float(min(centre + half, 1.0))


def _uniform(key, shape, lo=0.0, hi=1.0):
    return np.asarray(jax.random.uniform(key, shape, np.float64, lo, hi), dtype=np.float64)


def _disk(key, shape, radius):
    """Points uniform in the disk of ``radius`` (broadcast to ``shape``; radius ``r·√U``,
    uniform angle), strictly inside it: shape ``shape + (2,)``."""
    k_r, k_phi = jax.random.split(key)
    r = np.broadcast_to(np.asarray(radius, dtype=np.float64), shape) * np.sqrt(_uniform(k_r, shape))
    phi = _uniform(k_phi, shape, 0.0, 2 * np.pi)
    return np.stack([r * np.cos(phi), r * np.sin(phi)], axis=-1)


def _unit(phi):
    return np.stack([np.cos(phi), np.sin(phi)], axis=-1)


def _two_point_data(key, theta_x, size):
    """``size`` data sets with the law of :func:`gflow.theory.sample_two_point_data` at a
    fixed ``θ_x``, drawn in one vectorised call: shapes ``(size, 2, 2)``."""
    k_phi, k_sign, k_y = jax.random.split(key, 3)
    phi = _uniform(k_phi, (size,), 0.0, 2 * np.pi)
    sign = np.where(np.asarray(jax.random.bernoulli(k_sign, 0.5, (size,))), 1.0, -1.0)
    X = _unit(np.stack([phi, phi + sign * theta_x], axis=-1))
    Y = _unit(_uniform(k_y, (size, 2), 0.0, 2 * np.pi))
    for attempt in range(100):  # redraw labels in the probability-zero event det Y ≈ 0
        bad = np.abs(np.linalg.det(Y)) < 1e-8
        if not bad.any():
            return X, Y
        Y[bad] = _unit(_uniform(jax.random.fold_in(k_y, attempt + 1), (int(bad.sum()), 2), 0.0, 2 * np.pi))
    raise RuntimeError("could not draw linearly independent labels")


def _row_angle(W):
    """``∠(w_1, w_2)`` of ``W`` of shape ``(N, 2, 2)``; NaN where a row is zero."""
    ok = np.all(np.linalg.norm(W, axis=2) > 0, axis=1)
    out = np.full(W.shape[0], np.nan)
    if ok.any():
        out[ok] = theory.row_angle(W[ok])
    return out


def _square_loss(W, V, X, Y):
    """``½ Σ_i ‖V σ(W x_i) − y_i‖²`` in NumPy with ``σ'(0) = 0``; batch axes allowed."""
    H = np.maximum(np.einsum("...ni,...ji->...nj", X, W), 0.0)
    F = np.einsum("...nj,...oj->...no", H, V)
    return 0.5 * np.sum((F - Y) ** 2, axis=(-2, -1))


def _cone_index(W, X):
    """Cone of each row of ``W`` (``(..., 2, 2)``) for data ``X`` (``(..., 2, 2)``):
    0 = D, 1 = S, 2 = S1, 3 = S2 (strict activity ``w·x > 0``)."""
    P = np.einsum("...ji,...ni->...jn", W, X) > 0
    return np.where(P[..., 0], np.where(P[..., 1], 1, 2), np.where(P[..., 1], 3, 0))


_CONE_NAMES = np.array(["D", "S", "S1", "S2"])


def _flow_chunk(W0, V0, X, Y, *, t1, rtol, atol, pad_to):
    """Exact GF of a chunk, padded to ``pad_to`` members (copies of member 0) so that every
    chunk reuses one compiled program. Returns per-run arrays."""
    B = W0.shape[0]
    if X.ndim == 2:
        X = np.broadcast_to(X, (B, 2, 2))
        Y = np.broadcast_to(Y, (B, 2, 2))
    padded = [np.concatenate([a, np.repeat(a[:1], pad_to - B, axis=0)]) for a in (W0, V0, X, Y)]
    sol = simulate_batch(padded[:2], padded[2], padded[3], t1=t1, rtol=rtol, atol=atol)
    seq1, seq2, last1, last2 = [], [], [], []
    for b in range(B):
        r1, r2 = sol[b].regions(0)
        seq1.append(" > ".join(r1.sequence()))
        seq2.append(" > ".join(r2.sequence()))
        last1.append(r1.intervals[-1].label)
        last2.append(r2.intervals[-1].label)
    kinds = sol.crossings.kind[:B]
    return dict(
        W=sol.params[0][:B],
        V=sol.params[1][:B],
        loss=sol.loss[:B],
        status=sol.status[:B].astype(np.int64),
        t_final=sol.t[:B],
        n_events=np.minimum(sol.crossings.count[:B], kinds.shape[1]).astype(np.int64),
        n_slides=np.sum(kinds == Kind.SLIDE_START, axis=1).astype(np.int64),
        regions_1=np.array(seq1, dtype=str),
        regions_2=np.array(seq2, dtype=str),
        final_region_1=np.array(last1, dtype=str),
        final_region_2=np.array(last2, dtype=str),
        num_steps=sol.stats["num_accepted"][:B].astype(np.int64),
    )


def _success(status):
    return np.isin(status, [s.value for s in Status if s.success])


def _frac(k, n):
    return f"{int(k)}/{int(n)}" + (f" ({100 * k / n:.1f}%)" if n else "")


def _row(quantity, measured, paper, holds=None):
    return dict(quantity=quantity, measured=measured, paper=paper, holds=holds)


def _flow_options(t1, rtol, atol, chunk):
    return _positive("t1", t1), _positive("rtol", rtol), _positive("atol", atol), _count("chunk", chunk)


# ------------------------------------------------------------------------ Theorem 1


def thm1(n_datasets: int = 10_000, seed: int = 0, *, out=None, chunk: int = 2_500, progress=None) -> dict:
    """Theorem 1 (and Lemma 2) on random data: constructed zero-loss networks of rank 1.

    For each of ``n_datasets`` data sets (``x_1, x_2, y_1, y_2`` independent uniform unit
    vectors, so any angle ``θ_x ∈ (0, π)``, not only Assumption 2's) and a scale
    ``c = e^g``, ``g ~ N(0, 1)``: the Theorem 1 network ``W = [w_1; −c·w_1]``,
    ``V = Yᵀ σ(W Xᵀ)⁻¹`` (:func:`gflow.theory.theorem1_solution`); its loss, its residual
    ``max_i ‖N(x_i) − y_i‖`` and ``rank W`` by ``numpy.linalg.matrix_rank``. Lemma 2 on
    the same data: a Xavier-normal ``W'``, and when ``σ(W' Xᵀ)`` has rank 2 the second
    layer of :func:`gflow.theory.lemma2_solution` and its loss. No flow is integrated.

    Arguments:
        n_datasets: number of random data sets (positive int).
        seed: master ``jax.random`` seed.
        out: optional folder for chunks, ``results.npz`` and ``record.json``.
        chunk: data sets per chunk.
        progress: optional callable ``(chunks_done, chunks_total)`` called after each chunk.

    Returns:
        The result dict (module docstring). ``arrays``: ``X, Y`` ``(N, 2, 2)``, ``c``,
        ``W, V`` ``(N, 2, 2)``, ``loss``, ``residual``, ``rank_W``, ``sigma_ratio_W``,
        ``rank_A`` (rank of ``σ(W Xᵀ)``), ``lemma2_applies``, ``lemma2_loss`` (NaN where
        it does not apply), ``theta_x``.
    """
    t_start = time.perf_counter()
    n = _count("n_datasets", n_datasets)
    seed = _seed(seed)
    chunk = _count("chunk", chunk)
    out = _out(out)
    config = dict(n_datasets=n, seed=seed, chunk=chunk, data="x_i, y_i uniform on the unit circle", c="exp(N(0,1))")
    k_x, k_y, k_c, k_w = jax.random.split(jax.random.PRNGKey(seed), 4)
    X = _unit(_uniform(k_x, (n, 2), 0.0, 2 * np.pi))
    Y = _unit(_uniform(k_y, (n, 2), 0.0, 2 * np.pi))
    c = np.exp(np.asarray(jax.random.normal(k_c, (n,), np.float64)))
    W_rand = np.asarray(init_params(k_w, (2, 2, 2), batch=n)[0])

    def compute(start, stop):
        rows = dict(W=[], V=[], rank_A=[], lemma2_applies=[], lemma2_loss=[])
        for b in range(start, stop):
            W, V = theory.theorem1_solution(X[b], Y[b], c=float(c[b]))
            rows["W"].append(W)
            rows["V"].append(V)
            rows["rank_A"].append(np.linalg.matrix_rank(np.maximum(W @ X[b].T, 0.0)))
            try:
                W2, V2 = theory.lemma2_solution(W_rand[b], X[b], Y[b])
                rows["lemma2_applies"].append(True)
                rows["lemma2_loss"].append(_square_loss(W2, V2, X[b], Y[b]))
            except ValueError:
                rows["lemma2_applies"].append(False)
                rows["lemma2_loss"].append(np.nan)
        W, V = np.array(rows["W"]), np.array(rows["V"])
        Xc, Yc = X[start:stop], Y[start:stop]
        H = np.maximum(np.einsum("bni,bji->bnj", Xc, W), 0.0)
        R = np.einsum("bnj,boj->bno", H, V) - Yc
        return dict(
            X=Xc,
            Y=Yc,
            c=c[start:stop],
            theta_x=theory.angle(Xc[:, 0], Xc[:, 1]),
            W=W,
            V=V,
            loss=0.5 * np.sum(R**2, axis=(1, 2)),
            residual=np.max(np.linalg.norm(R, axis=2), axis=1),
            rank_W=np.array([np.linalg.matrix_rank(w) for w in W], dtype=np.int64),
            sigma_ratio_W=theory.sigma_ratio(W),
            rank_A=np.array(rows["rank_A"], dtype=np.int64),
            lemma2_applies=np.array(rows["lemma2_applies"]),
            lemma2_loss=np.array(rows["lemma2_loss"], dtype=np.float64),
        )

    a, computed, reused = _run_chunks("thm1", config, n, chunk, compute, out, progress)
    l2 = a["lemma2_applies"]
    summary = [
        _row("data sets (x_1, x_2 linearly independent)", str(n), "any"),
        _row("max loss L of the Theorem 1 networks", f"{a['loss'].max():.2e}", "0", bool(a["residual"].max() < 1e-8)),
        _row("max residual max_i ‖N(x_i) − y_i‖", f"{a['residual'].max():.2e}", "0", bool(a["residual"].max() < 1e-8)),
        _row(
            "rank W = 1 (numpy matrix_rank)", _frac(np.sum(a["rank_W"] == 1), n), "all", bool(np.all(a["rank_W"] == 1))
        ),
        _row("max σ_min/σ_max of W", f"{np.nanmax(a['sigma_ratio_W']):.2e}", "0"),
        _row("rank σ(W Xᵀ) = 2", _frac(np.sum(a["rank_A"] == 2), n), "all", bool(np.all(a["rank_A"] == 2))),
        _row("Lemma 2: random W with rank σ(W Xᵀ) = 2", _frac(l2.sum(), n), "—"),
        _row(
            "Lemma 2: max loss of V = Yᵀ σ(W Xᵀ)⁺",
            f"{np.nanmax(a['lemma2_loss']):.2e}" if l2.any() else "—",
            "0",
            bool(np.nanmax(a["lemma2_loss"]) < 1e-12) if l2.any() else None,
        ),
    ]
    return _finish("thm1", config, a, summary, out, t_start, computed, reused)


# ------------------------------------------------------------------------ Theorem 2


def thm2(
    n_datasets: int = 64,
    n_inits: int = 16,
    seed: int = 0,
    *,
    out=None,
    chunk: int = 128,
    t1: float = 200.0,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    loss_tol: float = 1e-8,
    progress=None,
) -> dict:
    """Theorem 2: from inside its initialisation condition, GF does not reach rank 1.

    ``n_datasets`` data sets from :func:`gflow.theory.sample_two_point_data` (``θ_x``
    uniform in ``(π/2, π)``), and for each ``n_inits`` starts with every ``w_j`` uniform in
    the disk of radius :func:`gflow.theory.theorem2_radius` ``(θ_x)`` and every ``v_j``
    (column of ``V``) uniform in the disk of radius ½, so the condition holds strictly
    (checked with :func:`gflow.theory.satisfies_theorem2`). Exact GF to ``t1``; a run
    *converged* if its status is a success and ``L < loss_tol``.

    Measured on converged runs: ``rank W(∞)`` (``numpy.linalg.matrix_rank``), the smallest
    ``σ_min(W)`` and ``σ_min/σ_max``, the cones the neurons end in, whether
    ``∠(w_1, w_2)`` lies in :func:`gflow.theory.theorem2_angle_interval` (SPEC §4) and
    whether ``‖w_i(∞)‖ ≥ √(1 − |ε_i|)``. The proof derives the angle interval and the norm
    bound for limits with one neuron in each of ``S_1, S_2`` (the only way rank 1 could
    arise), so they are reported on all converged runs and on those.

    Arguments:
        n_datasets, n_inits: positive ints; ``n_datasets·n_inits`` runs.
        seed: master ``jax.random`` seed.
        out, chunk, progress: as in :func:`thm1` (``chunk`` runs per compiled batch call).
        t1, rtol, atol: GF time and tolerances of :func:`gflow.simulate_batch`.
        loss_tol: convergence threshold on ``L``.

    Returns:
        The result dict. ``arrays`` per run: ``dataset``, ``theta_x``, ``X, Y``,
        ``W0, V0, W, V`` ``(N, 2, 2)``, ``loss``, ``status``, ``converged``, ``rank_W``,
        ``sigma_min``, ``sigma_ratio``, ``angle``, ``angle_lo``, ``angle_hi``,
        ``in_interval``, ``final_cones`` (e.g. ``"S1,S2"``), ``norm_bound_ok``, region
        sequences ``regions_1/2`` and engine statistics.
    """
    t_start = time.perf_counter()
    nd, ni = _count("n_datasets", n_datasets), _count("n_inits", n_inits)
    seed = _seed(seed)
    t1, rtol, atol, chunk = _flow_options(t1, rtol, atol, chunk)
    loss_tol = _positive("loss_tol", loss_tol)
    out = _out(out)
    config = dict(
        n_datasets=nd, n_inits=ni, seed=seed, chunk=chunk, t1=t1, rtol=rtol, atol=atol, loss_tol=loss_tol,
        init="w_j uniform in disk of radius theorem2_radius(theta_x), v_j uniform in disk of radius 1/2",
    )  # fmt: skip
    k_data, k_w, k_v = jax.random.split(jax.random.PRNGKey(seed), 3)
    data = [theory.sample_two_point_data(jax.random.fold_in(k_data, d)) for d in range(nd)]
    Xd = np.array([x for x, _ in data])
    Yd = np.array([y for _, y in data])
    theta_d = theory.angle(Xd[:, 0], Xd[:, 1])
    dataset = np.repeat(np.arange(nd), ni)
    theta = theta_d[dataset]
    X, Y = Xd[dataset], Yd[dataset]
    N = nd * ni
    W0 = _disk(k_w, (N, 2), np.repeat(theory.theorem2_radius(theta_d), ni)[:, None])  # rows w_j
    V0 = np.swapaxes(_disk(k_v, (N, 2), 0.5), 1, 2)  # columns v_j in the disk
    if not all(theory.satisfies_theorem2([W0[b], V0[b]], X[b]) for b in range(N)):
        raise RuntimeError("thm2: a sampled start violates Theorem 2's condition")  # cannot happen: r·√U < r

    def compute(start, stop):
        sl = slice(start, stop)
        return _flow_chunk(W0[sl], V0[sl], X[sl], Y[sl], t1=t1, rtol=rtol, atol=atol, pad_to=chunk)

    a, computed, reused = _run_chunks("thm2", config, N, chunk, compute, out, progress)
    W = a["W"]
    lo_hi = np.array([theory.theorem2_angle_interval(theta[b], [W0[b], V0[b]]) for b in range(N)])
    eps = np.linalg.norm(W0, axis=2) ** 2 - np.linalg.norm(V0, axis=1) ** 2  # ‖w_i‖² − ‖v_i‖² at t = 0
    ang = _row_angle(W)
    cones = _cone_index(W, X)
    final_cones = np.array([",".join(sorted(_CONE_NAMES[c])) for c in cones], dtype=str)
    a.update(
        dataset=dataset,
        theta_x=theta,
        X=X,
        Y=Y,
        W0=W0,
        V0=V0,
        converged=_success(a["status"]) & (a["loss"] < loss_tol),
        rank_W=np.array([np.linalg.matrix_rank(w) for w in W], dtype=np.int64),
        sigma_min=theory.singular_values(W)[:, -1],
        sigma_ratio=theory.sigma_ratio(W),
        angle=ang,
        angle_lo=lo_hi[:, 0],
        angle_hi=lo_hi[:, 1],
        in_interval=(ang >= lo_hi[:, 0]) & (ang < lo_hi[:, 1]),
        final_cones=final_cones,
        norm_bound_ok=np.all(np.linalg.norm(W, axis=2) >= np.sqrt(1 - np.abs(eps)), axis=1),
    )
    conv = a["converged"]
    k = int(conv.sum())
    s12 = conv & (final_cones == "S1,S2")
    ok_rank = bool(np.all(a["rank_W"][conv] == 2))
    summary = [
        _row("runs (data sets × starts)", f"{N} ({nd} × {ni})", "—"),
        _row("engine failures (status not a success)", str(int(np.sum(~_success(a["status"])))), "0"),
        _row(f"converged (L < {loss_tol:g} at t = {t1:g})", _frac(k, N), "not predicted"),
        _row("rank W(∞) = 2 among converged", _frac(np.sum(a["rank_W"][conv] == 2), k), "all", ok_rank if k else None),
        _row("smallest σ_min(W(∞)), converged", f"{a['sigma_min'][conv].min():.4f}" if k else "—", "> 0", ok_rank if k else None),
        _row("smallest σ_min/σ_max, converged", f"{a['sigma_ratio'][conv].min():.4f}" if k else "—", "> 0"),
        _row("converged runs ending in S1 × S2", _frac(s12.sum(), k), "— (proof's case)"),
        _row("∠(w_1, w_2) in Thm 2 interval, all converged", _frac(a["in_interval"][conv].sum(), k), "all (SPEC §4)",
             bool(np.all(a["in_interval"][conv])) if k else None),
        _row("∠(w_1, w_2) in Thm 2 interval, S1 × S2 endings", _frac(a["in_interval"][s12].sum(), s12.sum()), "all",
             bool(np.all(a["in_interval"][s12])) if s12.any() else None),
        _row("‖w_i(∞)‖ ≥ √(1 − |ε_i|), S1 × S2 endings", _frac(a["norm_bound_ok"][s12].sum(), s12.sum()), "all",
             bool(np.all(a["norm_bound_ok"][s12])) if s12.any() else None),
    ]  # fmt: skip
    return _finish("thm2", config, a, summary, out, t_start, computed, reused)


# ------------------------------------------------------------------------ Theorem 3


def thm3(
    thetas: Sequence[float] = THM3_THETAS,
    n_runs: int = 1000,
    seed: int = 0,
    *,
    out=None,
    chunk: int = 128,
    t1: float = 200.0,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    loss_tol: float = 1e-8,
    radius: float = 0.5,
    progress=None,
) -> dict:
    """Theorem 3: ``P[E] ≥ 2(θ_x/2π)²`` with ``V(0) = 0`` and ``w_j(0)`` uniform in a disk.

    For each ``θ_x`` in ``thetas``: ``n_runs`` runs, each on its own data set drawn like
    :func:`gflow.theory.sample_two_point_data` with that ``θ_x`` (so the estimate averages
    ``P[E | X, Y]`` over the labels; the bound holds for every data set, hence for the
    average), started from :func:`gflow.theory.sample_theorem3_init` (``radius`` ½ is the
    theorem's). Exact GF to ``t1``.

    Measured per ``θ_x``: ``P[E]`` (:func:`gflow.theory.theorem3_event` with ``L ≤
    loss_tol``) with a 95% Wilson interval against :func:`gflow.theory.theorem3_bound`;
    the same event with the angle interval replaced by the corrected
    :func:`gflow.theory.s1_s2_angle_interval` (``E*``); the fraction of ``S_1 × S_2``
    starts (exactly the bound in law); and for those starts: the fraction in ``E`` and in
    ``E*`` (the paper: all), the fraction whose neurons never change region (the region
    tracker), and the largest deviation from the exact limit
    :func:`gflow.theory.s1_s2_limit`.

    Arguments:
        thetas: angles ``θ_x`` in radians, each in ``(π/2, π)``.
        n_runs: runs per angle.
        seed, out, chunk, progress: as in :func:`thm2`.
        t1, rtol, atol, loss_tol: as in :func:`thm2`.
        radius: disk radius of ``w_j(0)``.

    Returns:
        The result dict; ``summary`` has one row per angle. ``arrays`` per run:
        ``theta_index``, ``theta_x``, ``X, Y, W0, V0, W, V``, ``loss``, ``status``,
        ``start_cones``, ``s1_s2_start``, ``event``, ``event_corrected``, ``in_paper_angle``,
        ``in_corrected_angle``, ``angle``, ``norms``, ``never_changed``, ``limit_error``
        (NaN unless ``s1_s2_start``), region sequences, engine statistics.
    """
    t_start = time.perf_counter()
    try:
        th = np.atleast_1d(np.asarray(thetas, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"thetas: expected a sequence of angles in (π/2, π) radians, got {thetas!r}") from None
    if th.ndim != 1 or th.size == 0 or not np.all((np.pi / 2 < th) & (th < np.pi)):
        raise ValueError(f"thetas: expected a non-empty sequence of angles in (π/2, π) radians, got {thetas!r}")
    n_runs = _count("n_runs", n_runs)
    seed = _seed(seed)
    t1, rtol, atol, chunk = _flow_options(t1, rtol, atol, chunk)
    loss_tol = _positive("loss_tol", loss_tol)
    radius = _positive("radius", radius)
    out = _out(out)
    config = dict(
        thetas=[float(t) for t in th], n_runs=n_runs, seed=seed, chunk=chunk, t1=t1, rtol=rtol, atol=atol,
        loss_tol=loss_tol, radius=radius,
    )  # fmt: skip
    key = jax.random.PRNGKey(seed)
    data = [_two_point_data(jax.random.fold_in(jax.random.fold_in(key, 1), i), t, n_runs) for i, t in enumerate(th)]
    X = np.concatenate([x for x, _ in data])
    Y = np.concatenate([y for _, y in data])
    theta_index = np.repeat(np.arange(th.size), n_runs)
    theta = th[theta_index]
    N = X.shape[0]
    W0, V0 = theory.sample_theorem3_init(jax.random.fold_in(key, 2), batch=N, radius=radius)

    def compute(start, stop):
        sl = slice(start, stop)
        return _flow_chunk(W0[sl], V0[sl], X[sl], Y[sl], t1=t1, rtol=rtol, atol=atol, pad_to=chunk)

    a, computed, reused = _run_chunks("thm3", config, N, chunk, compute, out, progress)
    W, V = a["W"], a["V"]
    start = _cone_index(W0, X)
    s12 = np.all(np.sort(start, axis=1) == [2, 3], axis=1)  # one neuron in S1, the other in S2
    conv = _success(a["status"]) & (a["loss"] <= loss_tol)
    norms = np.linalg.norm(W, axis=2)
    ang = _row_angle(W)
    p_lo, p_hi = theory.theorem3_angle_interval(theta)
    c_lo, c_hi = theory.s1_s2_angle_interval(theta, radius)
    n_lo, n_hi = (np.broadcast_to(v, theta.shape) for v in theory.theorem3_norm_interval(theta))
    norm_ok = np.all((norms > n_lo[:, None]) & (norms < n_hi[:, None]), axis=1)
    in_paper = (ang >= p_lo) & (ang <= p_hi)
    in_corr = (ang >= c_lo) & (ang <= c_hi)
    event = np.array([theory.theorem3_event([W[b], V[b]], X[b], a["loss"][b], loss_tol) for b in range(N)]) & conv
    limit_error = np.full(N, np.nan)
    for b in np.flatnonzero(s12):
        try:
            Wl, Vl = theory.s1_s2_limit([W0[b], V0[b]], X[b], Y[b])
            limit_error[b] = max(np.max(np.abs(Wl - W[b])), np.max(np.abs(Vl - V[b])))
        except ValueError:  # a start on a boundary to round-off: no closed form
            pass
    never = np.array([("> " not in r1) and ("> " not in r2) for r1, r2 in zip(a["regions_1"], a["regions_2"])])
    a.update(
        theta_index=theta_index,
        theta_x=theta,
        X=X,
        Y=Y,
        W0=W0,
        V0=V0,
        start_cones=start,
        s1_s2_start=s12,
        converged=conv,
        angle=ang,
        norms=norms,
        norm_ok=norm_ok,
        in_paper_angle=in_paper,
        in_corrected_angle=in_corr,
        event=event,
        event_corrected=conv & norm_ok & in_corr,
        never_changed=never,
        limit_error=limit_error,
    )
    summary = []
    for i, t in enumerate(th):
        m = theta_index == i
        s = m & s12
        k, ks = int(np.sum(a["event"][m])), int(s.sum())
        lo, hi = wilson_interval(k, n_runs)
        kc = int(np.sum(a["event_corrected"][m]))
        clo, chi = wilson_interval(kc, n_runs)
        bound = float(theory.theorem3_bound(t))
        err = np.nanmax(limit_error[s]) if ks and np.any(np.isfinite(limit_error[s])) else np.nan
        summary.append(
            {
                "θ_x": f"{np.degrees(t):.1f}°",
                "P[E] (95% CI)": f"{k / n_runs:.3f} [{lo:.3f}, {hi:.3f}]",
                "bound 2(θ_x/2π)²": f"{bound:.3f}",
                "P[E*] corrected (95% CI)": f"{kc / n_runs:.3f} [{clo:.3f}, {chi:.3f}]",
                "P[S1×S2 start]": f"{ks / n_runs:.3f}",
                "E | S1×S2 (paper: all)": _frac(np.sum(a["event"][s]), ks),
                "E* | S1×S2": _frac(np.sum(a["event_corrected"][s]), ks),
                "never change region | S1×S2": _frac(np.sum(never[s]), ks),
                "max |θ − s1_s2_limit|": f"{err:.1e}",
                "failures": str(int(np.sum(~_success(a["status"][m])))),
                "holds": bool(hi >= bound),
            }
        )
    return _finish("thm3", config, a, summary, out, t_start, computed, reused)


# ------------------------------------------------------------------- authors' experiment


def authors(
    n_seeds: int = 288,
    init: str = "xavier_normal",
    seed: int = 0,
    *,
    out=None,
    chunk: int = 128,
    t1: float = 150.0,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    radius: float | None = None,
    mse_tol: float = 1e-4,
    progress=None,
) -> dict:
    """The authors' experiment (SPEC §4) with exact gradient flow.

    Their data (:func:`gflow.theory.authors_data`), a 2-2-2 network without biases,
    ``n_seeds`` starts from ``init``, GF to ``t1 = 150`` (their 3·10⁶ full-batch steps of
    lr 1e-4 on MSE), and a run is *kept* when its MSE ``= L/2`` is below ``mse_tol``.

    ``init``: ``"xavier_normal"`` (their default: entries ``N(0, ½)``), ``"uniform_ball"``
    (each row of ``W`` and of ``V`` uniform in the disk of ``radius``, default 1e-4, their
    ``--init_max_norm``) or ``"thm3"`` (rows of ``W`` uniform in the disk of ``radius``,
    default 1e-4 as in their code, ``V = 0``; Theorem 3 itself uses ½).

    Measured: how many runs are kept, end with a dead neuron (final region ``D``, or
    ``origin``: ``w = 0`` reached by sliding), slid along a kink; the stable rank
    ``‖·‖_F²/‖·‖_σ²`` of each layer of the kept runs; how many kept runs are near rank 1
    (stable rank of ``W`` < 1.1, or ``σ_min/σ_max < 0.1``); and, under ``outcomes``, every
    pair of region sequences (neurons unordered) with how many runs it kept, lost and
    killed.

    Arguments:
        n_seeds: number of starts (the authors ran 288).
        init: one of :data:`AUTHORS_INITS`.
        seed: master ``jax.random`` seed.
        out, chunk, progress: as in :func:`thm2`.
        t1, rtol, atol: GF time and tolerances.
        radius: disk radius for ``uniform_ball`` / ``thm3`` (default 1e-4).
        mse_tol: the authors' threshold on the final MSE.

    Returns:
        The result dict plus ``outcomes`` (list of rows). ``arrays`` per run: ``W0, V0, W,
        V``, ``loss``, ``mse``, ``status``, ``kept``, ``dead``, ``slid``, ``stable_rank_W``,
        ``stable_rank_V``, ``sigma_ratio_W``, ``angle``, region sequences, engine
        statistics.
    """
    t_start = time.perf_counter()
    n = _count("n_seeds", n_seeds)
    if init not in AUTHORS_INITS:
        raise ValueError(f"init: expected one of {AUTHORS_INITS}, got {init!r}")
    seed = _seed(seed)
    t1, rtol, atol, chunk = _flow_options(t1, rtol, atol, chunk)
    mse_tol = _positive("mse_tol", mse_tol)
    if init == "xavier_normal":
        if radius is not None:
            raise ValueError(f"radius: expected None for init='xavier_normal', got {radius!r}")
    else:
        radius = 1e-4 if radius is None else _positive("radius", radius)
    out = _out(out)
    config = dict(
        n_seeds=n, init=init, seed=seed, chunk=chunk, t1=t1, rtol=rtol, atol=atol, radius=radius, mse_tol=mse_tol
    )
    X, Y = theory.authors_data()
    key = jax.random.PRNGKey(seed)
    if init == "xavier_normal":
        params = init_params(key, (2, 2, 2), batch=n)
    elif init == "uniform_ball":
        params = init_params(key, (2, 2, 2), "uniform_ball", radius=radius, batch=n)
    else:
        params = init_params(key, (2, 2, 2), "uniform_ball", radius=(radius, 0.0), batch=n, zero_layers=(1,))
    W0, V0 = (np.asarray(p, dtype=np.float64) for p in params)

    def compute(start, stop):
        sl = slice(start, stop)
        return _flow_chunk(W0[sl], V0[sl], X, Y, t1=t1, rtol=rtol, atol=atol, pad_to=chunk)

    a, computed, reused = _run_chunks("authors", config, n, chunk, compute, out, progress)
    W, V = a["W"], a["V"]
    mse = a["loss"] / 2.0
    kept = _success(a["status"]) & (mse < mse_tol)
    dead = np.isin(a["final_region_1"], ("D", "origin")) | np.isin(a["final_region_2"], ("D", "origin"))
    ang = _row_angle(W)
    a.update(
        W0=W0,
        V0=V0,
        mse=mse,
        kept=kept,
        dead=dead,
        slid=a["n_slides"] > 0,
        stable_rank_W=theory.stable_rank(W),
        stable_rank_V=theory.stable_rank(V),
        sigma_ratio_W=theory.sigma_ratio(W),
        angle=ang,
    )
    k = int(kept.sum())
    srW, srV = a["stable_rank_W"][kept], a["stable_rank_V"][kept]

    def spread(v):
        return f"{v.min():.4f} / {np.median(v):.4f} / {v.max():.4f}" if v.size else "—"

    near = int(np.sum(srW < 1.1))
    summary = [
        _row(
            "runs finished (status a success)",
            _frac(np.sum(_success(a["status"])), n),
            "all",
            bool(np.all(_success(a["status"]))),
        ),
        _row(f"kept: final MSE < {mse_tol:g}", _frac(k, n), "kept runs are the ones reported"),
        _row("ended with a dead neuron (final region D or w = 0)", _frac(dead.sum(), n), "—"),
        _row("kept runs that slid along a kink", _frac(np.sum(a["slid"][kept]), k), "—"),
        _row("stable rank W, kept: min / median / max", spread(srW), "away from 1 w.h.p."),
        _row("stable rank V, kept: min / median / max", spread(srV), "away from 1 w.h.p."),
        _row("kept runs with stable rank W < 1.1", _frac(near, k), "few (w.h.p. not near rank 1)"),
        _row("kept runs with σ_min/σ_max of W < 0.1", _frac(np.sum(a["sigma_ratio_W"][kept] < 0.1), k), "few"),
        _row("smallest σ_min/σ_max of W, kept", f"{a['sigma_ratio_W'][kept].min():.4f}" if k else "—", "> 0"),
    ]
    pairs = Counter()
    for b in range(n):
        pair = " | ".join(sorted((str(a["regions_1"][b]), str(a["regions_2"][b]))))
        pairs[pair, "kept" if kept[b] else "lost", bool(dead[b])] += 1
    by_pair = {}
    for (pair, fate, is_dead), count in pairs.items():
        row = by_pair.setdefault(
            pair, {"region sequences (neuron a | neuron b)": pair, "runs": 0, "kept": 0, "lost": 0, "dead neuron": 0}
        )
        row["runs"] += count
        row[fate] += count
        row["dead neuron"] += count if is_dead else 0
    outcomes = sorted(by_pair.values(), key=lambda r: (-r["runs"], r["region sequences (neuron a | neuron b)"]))
    return _finish("authors", config, a, summary, out, t_start, computed, reused, extra=dict(outcomes=outcomes))


# ----------------------------------------------------------------------- one example


def example(result: dict, index: int, n_save: int = 600, t1: float | None = None):
    """Re-integrate run ``index`` of a GF experiment with saved states, for figures.

    Arguments:
        result: a result dict of :func:`thm2`, :func:`thm3` or :func:`authors`.
        index: the run, ``0 ≤ index < N``.
        n_save: number of save times: ``0`` and ``n_save − 1`` times geometrically spaced
            from ``1e-3`` to ``t1`` (so log-time plots resolve the start).
        t1: final time (default: the experiment's).

    Returns:
        ``(solution, X, Y)``: a single-trajectory :class:`gflow.Solution` with ``ts``/``ys``
        and the run's data.
    """
    if result.get("name") not in ("thm2", "thm3", "authors"):
        raise ValueError(f"result: expected a result of thm2, thm3 or authors, got name {result.get('name')!r}")
    a, cfg = result["arrays"], result["config"]
    N = len(a["W0"])
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < N:
        raise ValueError(f"index: expected an int in [0, {N}), got {index!r}")
    n_save = _count("n_save", n_save)
    t1 = cfg["t1"] if t1 is None else _positive("t1", t1)
    if "X" in a:
        X, Y = a["X"][index], a["Y"][index]
    else:
        X, Y = theory.authors_data()
    ts = np.concatenate([[0.0], np.geomspace(min(1e-3, t1 / 2), t1, n_save - 1)]) if n_save > 1 else np.array([t1])
    sol = simulate(
        [a["W0"][index], a["V0"][index]], X, Y, t1=t1, rtol=cfg["rtol"], atol=cfg["atol"], saveat=ts, throw=False
    )
    return sol, X, Y


# --------------------------------------------------------------------------- figures


def _pick_example(result):
    a = result["arrays"]
    if result["name"] == "thm3":
        good = a["s1_s2_start"] & ~a["in_paper_angle"]  # an S1×S2 start that leaves the paper's interval
        good = good if good.any() else a["s1_s2_start"]
    elif result["name"] == "thm2":
        good = a["converged"]
    else:
        good = a["kept"] & (a["n_events"] > 0)
        good = good if good.any() else a["kept"]
    pool = np.flatnonzero(good) if np.any(good) else np.arange(len(a["loss"]))
    return int(pool[np.argmax(a["n_events"][pool])])


def save_figures(result: dict, folder, index: int | None = None) -> list[Path]:
    """Write the PNG figures of an experiment result into ``folder``; returns their paths.

    ``thm1``: a Theorem 1 network on the authors' data over the cones, and the residuals.
    ``thm2``: ``σ_min/σ_max`` and the angle's position in Theorem 2's interval.
    ``thm3``: ``P[E]`` against the bound, and ``∠(w_1, w_2)`` per ``θ_x`` with both intervals.
    ``authors``: stable-rank histograms of both layers and ``σ_min/σ_max`` of ``W``.
    All but ``thm1`` add ``<name>_example.png``: run ``index`` (default: a representative
    run) re-integrated with saved states: trajectory over the cones with crossing markers,
    region timeline, loss and singular values of ``W``.
    """
    from matplotlib.figure import Figure  # not pyplot: no backend or global figure state involved

    from . import plot

    def subplots(*args, **kwargs):
        fig = Figure(figsize=kwargs.pop("figsize"))
        return fig, fig.subplots(*args, **kwargs)

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name, a = result["name"], result["arrays"]
    paths = []

    def save(fig, stem, **layout):
        fig.tight_layout(**layout)
        path = folder / f"{stem}.png"
        fig.savefig(path, dpi=120)
        paths.append(path)

    if name == "thm1":
        X, Y = theory.authors_data()
        W, _ = theory.theorem1_solution(X, Y, c=0.7)
        fig, axes = subplots(1, 2, figsize=(11, 5))
        plot.plot_cones(X, ax=axes[0], radius=1.6)
        for text in axes[0].texts:  # the cones' names off the line of w_1, w_2
            if text.get_text() in ("S1", "S2"):
                text.set_y(text.get_position()[1] - 0.45)
        axes[0].plot([-1.6 * W[0, 0], 1.6 * W[0, 0]], [-1.6 * W[0, 1], 1.6 * W[0, 1]], "k:", lw=1)
        for j, colour in enumerate(("#08519c", "#a50f15")):
            axes[0].annotate("", xy=W[j], xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", lw=2.2, color=colour))
            axes[0].text(*(W[j] + [0, 0.12]), f"$w_{j + 1}$", color=colour, ha="center", fontsize=12)
        axes[0].set_title(r"Theorem 1 on the authors' data: $w_2 = -0.7\,w_1$, rank W = 1")
        plot.plot_histogram(
            np.log10(np.maximum(a["residual"], 1e-20)),
            ax=axes[1],
            xlabel=r"$\log_{10} \max_i \|N(x_i) - y_i\|$ (exact zeros at $-20$)",
        )
        axes[1].set_ylabel("data sets")
        axes[1].set_title(f"{len(a['residual'])} random data sets: residuals of the rank-1 networks")
        save(fig, "thm1")
        return paths
    if name == "thm2":
        conv = a["converged"]
        s12 = conv & (a["final_cones"] == "S1,S2")
        fig, axes = subplots(1, 2, figsize=(11, 4))
        plot.plot_sigma_ratio(a["sigma_ratio"][conv], ax=axes[0])
        axes[0].set_title(f"converged runs ({int(conv.sum())}): rank W(∞) = 2 iff > 0")
        pos = (a["angle"] - a["angle_lo"]) / (a["angle_hi"] - a["angle_lo"])
        plot.plot_histogram(pos[s12], interval=(0, 1), ax=axes[1], bins=30, label="ending in S1×S2",
                            interval_label="Theorem 2 interval", xlabel=r"$(\angle - lo)/(hi - lo)$")  # fmt: skip
        other = conv & ~s12
        if other.any():
            axes[1].hist(pos[other], bins=30, color="#e6550d", alpha=0.6, label="other endings (S, S1 / S, S)")
            axes[1].legend(fontsize=8)
        axes[1].set_title(r"$\angle(w_1(\infty), w_2(\infty))$ relative to Theorem 2's interval")
        save(fig, "thm2_rank")
    elif name == "thm3":
        th = np.asarray(result["config"]["thetas"])
        n = result["config"]["n_runs"]
        k = np.array([a["event"][a["theta_index"] == i].sum() for i in range(th.size)])
        kc = np.array([a["event_corrected"][a["theta_index"] == i].sum() for i in range(th.size)])
        ci = np.array([wilson_interval(int(x), n) for x in k])
        fig, ax = subplots(figsize=(6, 4))
        plot.plot_probability(th, k / n, ci[:, 0], ci[:, 1], theory.theorem3_bound, ax=ax, p_corrected=kc / n)
        ax.set_title(f"Theorem 3: P[E] over {n} runs per angle")
        save(fig, "thm3_probability")
        cols = min(3, th.size)
        rows = -(-th.size // cols)
        fig, axes = subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
        for i, t in enumerate(th):
            ax = axes.flat[i]
            m = (a["theta_index"] == i) & a["s1_s2_start"]
            plot.plot_angles(
                a["angle"][m],
                theory.theorem3_angle_interval(t),
                theory.s1_s2_angle_interval(t, result["config"]["radius"]),
                ax=ax,
                bins=25,
            )
            ax.set_title(rf"$\theta_x$ = {np.degrees(t):.0f}°: S1×S2 starts ({int(m.sum())})", fontsize=9)
        for ax in list(axes.flat)[th.size :]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()  # one legend for all panels
        for ax in list(axes.flat)[: th.size]:
            ax.get_legend().remove()
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
        save(fig, "thm3_angles", rect=(0, 0.4 / (3.4 * rows), 1, 1))
    elif name == "authors":
        kept = a["kept"]
        fig, axes = subplots(1, 3, figsize=(15, 4))
        plot.plot_stable_rank(a["stable_rank_W"][kept], ax=axes[0], layer="W")
        plot.plot_stable_rank(a["stable_rank_V"][kept], ax=axes[1], layer="V")
        for ax in axes[:2]:
            ax.set_title(f"kept runs ({int(kept.sum())}/{len(kept)}, MSE < {result['config']['mse_tol']:g})")
        plot.plot_sigma_ratio(a["sigma_ratio_W"][kept], ax=axes[2])
        axes[2].set_title(r"kept runs: $\sigma_{min}(W)/\sigma_{max}(W)$")
        save(fig, "authors_stable_rank")
    else:
        raise ValueError(f"result: expected a result of thm1, thm2, thm3 or authors, got name {name!r}")
    index = _pick_example(result) if index is None else index
    sol, X, Y = example(result, index)
    fig, axes = subplots(2, 2, figsize=(11, 9))
    plot.plot_trajectory(sol, X, ax=axes[0, 0])
    axes[0, 0].set_title(f"run {index}: first-layer weights (x: kink events)")
    plot.plot_regions(sol, ax=axes[0, 1])
    plot.plot_loss_and_singular_values(sol, X, Y, axes=axes[1])
    save(fig, f"{name}_example")
    return paths
