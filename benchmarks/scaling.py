"""How gflow's cost grows with batch size, depth, width, number of points and ``t1``.

One factor at a time is varied around a base problem: the authors' two-point data, a
2-2-2 network, ``B = 64`` Xavier-normal initialisations, ``t1 = 150``, gflow's default
tolerances (``rtol 1e-8, atol 1e-10``), square loss.

- batch: ``B`` Xavier seeds of the base problem;
- depth: ``k`` layers of width 2 (``(2, 2, ..., 2)``, ``k − 1`` hidden layers);
- width: ``(2, m, 2)``;
- points: ``n`` random unit inputs in the plane with random unit labels (``n = 2``
  included, on random data too, so that the sweep is homogeneous);
- t1: log-spaced final times on the base problem.

gflow runs with its defaults: the batch split over every local JAX device (one CPU device
per core, ``XLA_FLAGS=--xla_force_host_platform_device_count`` as in
:mod:`benchmarks.engine`), gflow's default 16 lanes per device.

Every configuration runs in a fresh Python process (``--worker``), so that its peak
memory is its own: the peak resident set size of that process
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``; it includes the Python interpreter, JAX's
runtime and XLA's compiler) and the increase of the resident set (``VmRSS``) over its
value just before the first gflow call. In a worker the first call compiles and is timed
on its own; ``--repeats`` further calls are timed and their median is the wall time. The
``t1`` sweep runs in the base configuration's worker, after the base ``t1`` (``t1`` does
not change the compiled program).

Run ``python -m benchmarks.scaling --help`` for the options; ``--full`` runs the large
sweeps (batch 1–4096, depth 2–6, width 2–16, points 2–32, t1 1–10^4; not timed with the
current engine: expect 15–30 min on 2 cores, depth 6 alone took ~6 min with the previous
one). The default sweeps take about 3–6 minutes on 2 cores, depending on the load, most
of it compilation (7–45 s per configuration). Results are printed as Rich tables and written to JSON (default
``benchmarks/results/scaling.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# benchmarks.gd sets XLA_FLAGS (one CPU device per core) before JAX is imported: import it first.
from .gd import run_info

BASE = dict(widths=(2, 2, 2), n=2, data="authors", batch=64, t1=150.0)
SMALL = dict(
    batch=(1, 64, 1024),
    depth=(2, 3, 4),
    width=(2, 4, 16),
    points=(2, 8),
    t1=(1.0, 10.0, 100.0, 1000.0),
)
FULL = dict(
    batch=(1, 4, 16, 64, 256, 1024, 4096),
    depth=(2, 3, 4, 5, 6),
    width=(2, 4, 8, 16),
    points=(2, 4, 8, 16, 32),
    t1=(1.0, 10.0, 100.0, 1000.0, 10000.0),
)


def _ints(s):
    return tuple(int(v) for v in s.split(","))


def _floats(s):
    return tuple(float(v) for v in s.split(","))


# ------------------------------------------------------------------------- worker


def _rss_kib():
    """Current resident set size of this process (``VmRSS``, KiB), or None."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _problem(cfg):
    import jax
    import numpy as np

    import gflow
    from gflow import theory

    widths = tuple(cfg["widths"])
    if cfg["data"] == "authors":
        X, Y = theory.authors_data()
    else:  # n random unit inputs and unit labels (fixed data seed)
        rng = np.random.default_rng(cfg.get("data_seed", 12345))
        X = rng.standard_normal((cfg["n"], widths[0]))
        Y = rng.standard_normal((cfg["n"], widths[-1]))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    params = gflow.init_params(jax.random.PRNGKey(cfg["seed"]), widths, "xavier_normal", batch=cfg["batch"])
    return [np.asarray(W) for W in params], X, Y


def _bucket(B):
    return 1 << max(B - 1, 0).bit_length()


def _mean_max(a):
    import numpy as np

    a = np.asarray(a, dtype=float)
    return {"mean": float(np.mean(a)), "max": float(np.max(a))}


def worker(cfg):
    """Run one configuration (several ``t1`` values share the compiled program) and
    return one record per ``t1``."""
    import resource

    import jax
    import numpy as np

    import gflow

    params, X, Y = _problem(cfg)
    devices = cfg.get("devices")
    D = len(jax.local_devices()) if devices is None else devices
    rss0 = _rss_kib()
    out = []
    for i, t1 in enumerate(cfg["t1s"]):
        kw = dict(loss="square", t1=t1, rtol=cfg["rtol"], atol=cfg["atol"], devices=devices)
        start = time.perf_counter()
        sol = gflow.simulate_batch(params, X, Y, **kw)
        first = time.perf_counter() - start
        times = []
        for _ in range(cfg["repeats"]):
            start = time.perf_counter()
            sol = gflow.simulate_batch(params, X, Y, **kw)
            times.append(time.perf_counter() - start)
        wall = statistics.median(times)
        B = params[0].shape[0]
        status = {gflow.Status(int(c)).name: int(np.sum(sol.status == c)) for c in np.unique(sol.status)}
        rss = _rss_kib()
        out.append(
            dict(
                t1=t1,
                first_call_s=first,
                compiled_here=i == 0,
                timed_s=times,
                wall_s=wall,
                us_per_trajectory=wall / B * 1e6,
                devices=D,
                shard=_bucket(-(-B // D)),
                lanes=_bucket(min(-(-B // D), 16)),
                status=status,
                all_success=bool(all(gflow.Status(int(c)).success for c in sol.status)),
                accepted_steps=_mean_max(sol.stats["num_accepted"]),
                rejected_steps=_mean_max(sol.stats["num_rejected"]),
                events=_mean_max(sol.crossings.count),
                iterations=_mean_max(sol.stats["num_iterations"]),
                pre_activations=int(X.shape[0] * sum(W.shape[1] for W in params[:-1])),
                parameters=int(sum(W.shape[1] * W.shape[2] for W in params)),
                peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                rss_before_first_call_mib=None if rss0 is None else rss0 / 1024,
                rss_increase_mib=None if rss0 is None or rss is None else (rss - rss0) / 1024,
            )
        )
    return out


def run_worker(cfg, timeout):
    """Run :func:`worker` in a fresh Python process; returns its records or an error."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.scaling", "--worker", json.dumps(cfg)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s", time.perf_counter() - start
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return None, (proc.stderr or proc.stdout)[-2000:], wall
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :]), None, wall
    return None, "no result line: " + proc.stdout[-2000:], wall


# ------------------------------------------------------------------------- driver


def plan(sweeps, base, rtol, atol, repeats, seed, devices=None):
    """The list of (sweep name, value, worker config). The base configuration runs once,
    with every ``t1`` of the ``t1`` sweep after the base ``t1`` (the compiled program is
    the same), and is shared by every sweep that contains it."""
    common = dict(rtol=rtol, atol=atol, repeats=repeats, seed=seed, devices=devices)
    t1s = [base["t1"]] + [t for t in sweeps["t1"] if t != base["t1"]]

    def cfg(widths=base["widths"], n=base["n"], data=base["data"], batch=base["batch"]):
        is_base = (tuple(widths), n, data, batch) == (tuple(base["widths"]), base["n"], base["data"], base["batch"])
        return dict(widths=list(widths), n=n, data=data, batch=batch, t1s=t1s if is_base else [base["t1"]], **common)

    items = []
    for B in sweeps["batch"]:
        items.append(("batch", B, cfg(batch=B)))
    for k in sweeps["depth"]:
        items.append(("depth", k, cfg(widths=(2,) * (k + 1))))
    for m in sweeps["width"]:
        items.append(("width", m, cfg(widths=(2, m, 2))))
    for n in sweeps["points"]:
        items.append(("points", n, cfg(n=n, data="random")))
    if sweeps["t1"]:
        items.append(("t1", None, cfg()))
    return items


def print_tables(results, machine, config):
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    names = {
        "batch": "batch size B",
        "depth": "depth k (width 2)",
        "width": "width m (2-m-2)",
        "points": "points n (random data)",
        "t1": "t1",
    }
    for sweep in ("batch", "depth", "width", "points", "t1"):
        rows = [r for r in results if r["sweep"] == sweep]
        if not rows:
            continue
        rows.sort(key=lambda r: r["value"])
        devices = next((r["devices"] for r in rows if "devices" in r), "?")
        t = Table(
            title=(
                f"gflow cost vs {names[sweep]} (base: 2-2-2, authors' data, B={config['base']['batch']}, "
                f"t1={config['base']['t1']:g}, rtol={config['rtol']:g}, atol={config['atol']:g}; {devices} devices)"
            )
        )
        for col in (
            names[sweep],
            "B",
            "P",
            "compile+1st s",
            "wall s",
            "µs/traj",
            "acc. steps mean/max",
            "rej. mean",
            "events mean/max",
            "iters mean/max",
            "status",
            "peak RSS MiB (+Δ)",
        ):
            t.add_column(col, justify="right")
        for r in rows:
            if r.get("error"):
                t.add_row(str(r["value"]), "", "", "", "[red]error[/red]", r["error"].splitlines()[-1][:60])
                continue
            status = ", ".join(f"{k} {v}" for k, v in r["status"].items())
            t.add_row(
                f"{r['value']:g}" if isinstance(r["value"], float) else str(r["value"]),
                str(r["batch"]),
                str(r["pre_activations"]),
                f"{r['first_call_s']:.1f}" + ("" if r["compiled_here"] else "†"),
                f"{r['wall_s']:.3f}",
                f"{r['us_per_trajectory']:.0f}",
                f"{r['accepted_steps']['mean']:.0f} / {r['accepted_steps']['max']:.0f}",
                f"{r['rejected_steps']['mean']:.1f}",
                f"{r['events']['mean']:.2f} / {r['events']['max']:.0f}",
                f"{r['iterations']['mean']:.0f} / {r['iterations']['max']:.0f}",
                status if r["all_success"] else f"[red]{status}[/red]",
                f"{r['peak_rss_mib']:.0f} (+{r['rss_increase_mib']:.0f})",
            )
        console.print(t)
    console.print(
        "P = pre-activations per trajectory. Each row ran in a fresh process: compile+1st = its first call, "
        "which compiles († = compiled earlier in the same process, t1 sweep); wall = median of the timed calls; "
        "µs/traj = wall / B (gflow splits the batch over D devices, one per core, each shard padded to a power "
        "of two and fed through 16 lanes). Peak RSS = "
        "ru_maxrss of that process (interpreter, JAX runtime and compiler included); +Δ = VmRSS after the runs "
        "minus VmRSS just before the first gflow call."
    )
    console.print(describe_machine(machine))


def describe_machine(machine):
    from ._machine import describe

    return (
        describe(machine)
        + f"\nload average at start / end: {machine['loadavg_at_start']} / {machine.get('loadavg_at_end')}"
        + f"\ngit: {machine.get('git')}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="large sweeps (expect 15-30 min on 2 cores)")
    parser.add_argument("--batches", type=_ints, help="batch sizes, comma-separated (default 1,64,1024)")
    parser.add_argument("--depths", type=_ints, help="depths (number of layers), default 2,3,4")
    parser.add_argument("--widths", type=_ints, help="hidden widths of a 2-m-2 network, default 2,4,16")
    parser.add_argument("--points", type=_ints, help="numbers of data points, default 2,8")
    parser.add_argument("--t1s", type=_floats, help="final times besides the base 150, default 1,10,100,1000")
    parser.add_argument("--base-batch", type=int, default=BASE["batch"], help="batch of the non-batch sweeps (64)")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--atol", type=float, default=1e-10)
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per configuration (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=None, help="JAX devices for gflow (default: all; one per core)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per worker process (default 900)")
    parser.add_argument("--out", default="benchmarks/results/scaling.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        return None

    sweeps = dict(FULL if args.full else SMALL)
    for key, val in (
        ("batch", args.batches),
        ("depth", args.depths),
        ("width", args.widths),
        ("points", args.points),
        ("t1", args.t1s),
    ):
        if val is not None:
            sweeps[key] = val
    base = dict(BASE, batch=args.base_batch)
    machine = run_info()
    start = time.perf_counter()
    done = {}
    results = []
    for sweep, value, cfg in plan(sweeps, base, args.rtol, args.atol, args.repeats, args.seed, args.devices):
        key = json.dumps(cfg, sort_keys=True)
        if key not in done:
            done[key] = run_worker(cfg, args.timeout)
            recs, err, wall = done[key]
            print(
                f"[{sweep} = {value if sweep != 't1' else cfg['t1s']}] {'error: ' + err.splitlines()[-1] if err else 'ok'} ({wall:.1f} s)",
                flush=True,
            )
        recs, err, wall = done[key]
        shared = dict(
            sweep=sweep,
            widths=cfg["widths"],
            n=cfg["n"],
            data=cfg["data"],
            batch=cfg["batch"],
            process_wall_s=wall,
        )
        if err:
            results.append(dict(shared, value=value, error=err))
            continue
        for rec in recs:
            if sweep == "t1":
                results.append(dict(shared, value=rec["t1"], **rec))
            elif rec["t1"] == base["t1"]:
                results.append(dict(shared, value=value, **rec))
    try:
        machine["loadavg_at_end"] = list(os.getloadavg())
    except OSError:
        machine["loadavg_at_end"] = None
    config = dict(
        base=base,
        sweeps={k: list(v) for k, v in sweeps.items()},
        rtol=args.rtol,
        atol=args.atol,
        repeats=args.repeats,
        seed=args.seed,
        devices=args.devices,
        lanes="gflow default (16 per device)",
        init="xavier_normal",
        loss="square",
        memory=(
            "peak_rss_mib: resource.getrusage(RUSAGE_SELF).ru_maxrss of a fresh worker process per configuration "
            "(interpreter, JAX runtime and compilation included); rss_increase_mib: VmRSS after the runs minus "
            "VmRSS before the first gflow call"
        ),
    )
    print_tables(results, machine, config)
    total = time.perf_counter() - start
    from ._machine import save_record

    save_record(args.out, "scaling", config, machine, dict(records=results, benchmark_wall_s=total))
    print(f"benchmark wall time {total:.0f} s")
    return results


if __name__ == "__main__":
    main()
