"""Throughput of gflow against the number of devices, on forced host (CPU) devices.

The problem is the authors' setting (their two points, a 2-2-2 network, Xavier-normal
starts, ``t1 = 150``, gflow's default tolerances ``rtol 1e-8, atol 1e-10``) with ``B``
trajectories, the starts of :mod:`gflow.sweep` (trajectory ``i`` from ``fold_in(PRNGKey(seed), i)``).

- ``simulate_batch`` on ``D`` devices, for each ``D`` of ``--devices`` (default 1, 2, 4):
  one call over all ``B`` trajectories, split evenly over the first ``D`` devices
  (``jax.pmap`` of one compiled program; ``D = 1`` is the plain single-device program).
- ``sweep`` on the most devices: :func:`gflow.sweep.run` over the same trajectories in
  chunks of each size in ``--chunks`` (default 1024, i.e. one chunk, and 256 = 4 devices ×
  64 lanes), each chunk written to disk (checksummed, ``fsync``-ed, renamed) and merged at
  the end, into a fresh temporary folder each time: what chunking and the files cost on top
  of the plain call.

All settings run in one process, side by side: each is compiled and run once (timed as
"first call"), then the settings are timed in turn for ``--repeats`` rounds, so that a
change of machine load hits all alike; the median is reported. Every device gets at least
``--lanes`` trajectories (``B`` and every chunk ``≥ D · lanes`` are checked), so each
device runs the same per-device program whatever ``D``, and the final weights, times,
losses, statuses and crossings are compared bit for bit with the 1-device run.

Forced host devices are not cores. ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
(set below, before JAX is imported, to the largest ``D`` unless the caller set it) makes
XLA expose ``N`` CPU devices, each running its share of the batch on its own thread; they
share the machine's cores, so on a 2-core machine ``D = 4`` cannot beat ``D = 2`` and
at best matches it. On a GPU or TPU host the same code uses the real accelerators.

Run ``python -m benchmarks.devices --help`` for the options. Results are printed as a table
with the machine and written to JSON (default ``benchmarks/results/devices.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from ._machine import describe, save_record


def _ints(s):
    return tuple(int(v) for v in s.split(",") if v.strip())


def _force_devices(n):
    """Ask XLA for ``n`` host devices unless the caller already chose a number."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


def _compare(pairs):
    """``pairs``: name -> (array, reference). Returns the names whose arrays differ in any
    bit, the largest relative and the largest absolute difference among them (a relative
    difference of a value at round-off level, such as a converged ‖∇L‖, can be large
    while the absolute one is round-off)."""
    import numpy as np

    differ, rel, ab = [], 0.0, 0.0
    for name, (x, y) in pairs.items():
        x, y = np.asarray(x), np.asarray(y)
        if not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            differ.append(name)
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = max(rel, float(np.nanmax(np.abs(x - y) / np.abs(y))))
                ab = max(ab, float(np.nanmax(np.abs(x - y))))
    return differ, rel, ab


def _fields(sol):
    """Every field of a solution by its pytree path (``.params[0]``, ``.loss``, ...)."""
    import jax

    return {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(sol)[0]}


def run(args):
    """Compile and time every setting; return the records (one per setting)."""
    import jax
    import numpy as np

    import gflow
    from gflow import sweep, theory

    local = jax.local_devices()
    counts = [d for d in args.devices if d <= len(local)]
    skipped = [d for d in args.devices if d > len(local)]
    if skipped:
        print(
            f"skipping devices {skipped}: only {len(local)} local devices (XLA_FLAGS={os.environ.get('XLA_FLAGS')!r})"
        )
    cfg = sweep.check_config(
        dict(widths=[2, 2, 2], data="authors", t1=args.t1, rtol=args.rtol, atol=args.atol, trajectories=args.batch,
             lanes=args.lanes, seed=args.seed, out="unused")
    )  # fmt: skip
    X, Y = theory.authors_data()
    params = sweep._initial(cfg, np.arange(args.batch))
    flow = sweep._flow_options(cfg)
    calls = {
        f"simulate_batch D={d}": (d, lambda d=d: gflow.simulate_batch(params, X, Y, devices=d, **flow)) for d in counts
    }
    top = max(counts)
    tmp = tempfile.TemporaryDirectory(prefix="gflow-devices-")
    runs = iter(range(10**6))

    def sweep_call(chunk):
        out = os.path.join(tmp.name, f"run{next(runs)}")
        return sweep.run(dict(cfg, chunk=chunk, out=out), devices=top)

    for chunk in args.chunks:
        calls[f"sweep D={top}, chunk {chunk}"] = (top, lambda chunk=chunk: sweep_call(chunk))

    first, results = {}, {}
    for name, (_, fn) in calls.items():
        start = time.perf_counter()
        results[name] = fn()
        first[name] = time.perf_counter() - start
        print(f"{name}: first call (compile + run) {first[name]:.1f} s", flush=True)
    times = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, (_, fn) in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    tmp.cleanup()

    base_name = f"simulate_batch D={min(counts)}"
    base = statistics.median(times[base_name])
    reference = _fields(results[base_name])
    records = []
    for name, (d, _) in calls.items():
        wall = statistics.median(times[name])
        if name.startswith("sweep"):
            merged = results[name]["arrays"]
            keys = {".params[0]": "params_0", ".params[1]": "params_1", ".t": "t", ".loss": "loss", ".grad_norm": "grad_norm", ".status": "status"}  # fmt: skip
            differ, diff, abs_diff = _compare({k: (merged[v], reference[k]) for k, v in keys.items()})
            status = results[name]["record"]["summary"]["status"]
        else:
            fields = _fields(results[name])
            differ, diff, abs_diff = _compare({k: (fields[k], reference[k]) for k in fields})
            s = results[name].status
            status = {gflow.Status(int(c)).name: int(np.sum(s == c)) for c in np.unique(s)}
        records.append(
            dict(
                setting=name,
                devices=d,
                first_call_s=first[name],
                timed_s=times[name],
                wall_s=wall,
                throughput_per_s=args.batch / wall,
                ratio_to_one_device=base / wall,
                per_device_efficiency=base / wall / d,
                bitwise_equal_to_one_device=not differ,
                fields_differing=differ,
                max_relative_diff=diff,
                max_abs_diff=abs_diff,
                status=status,
            )
        )
    return records


def print_table(records, config, machine):
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    table = Table(
        title=f"gflow throughput vs devices: authors' 2-2-2, B = {config['batch']}, t1 = {config['t1']:g}, "
        f"rtol {config['rtol']:g}, atol {config['atol']:g}, {config['lanes']} lanes per device"
    )
    for col in (
        "setting",
        "first call s",
        "wall s (median)",
        "traj/s",
        "× 1 device",
        "per device",
        "bits equal to D=1",
    ):
        table.add_column(col, justify="left" if col == "setting" else "right")
    for r in records:
        table.add_row(
            r["setting"],
            f"{r['first_call_s']:.1f}",
            f"{r['wall_s']:.3f}",
            f"{r['throughput_per_s']:.0f}",
            f"{r['ratio_to_one_device']:.2f}",
            f"{r['per_device_efficiency']:.2f}",
            "all fields"
            if not r["fields_differing"]
            else f"all but {', '.join(r['fields_differing'])} (≤ {r['max_relative_diff']:.1e} rel., "
            f"{r['max_abs_diff']:.1e} abs.)",
        )
    console.print(table)
    console.print(
        f"Forced host devices share this machine's {machine['cpus_usable']} usable cores: more devices than cores "
        "cannot help. first call = compile + run; wall = median of the timed rounds (settings interleaved)."
    )
    console.print(describe(machine))
    if machine.get("loadavg_at_start"):
        console.print(f"Load average at start: {', '.join(f'{x:.2f}' for x in machine['loadavg_at_start'])}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.devices", description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=_ints, default=(1, 2, 4), help="device counts to compare (default 1,2,4)")
    parser.add_argument("--batch", type=int, default=1024, help="trajectories per call (default 1024)")
    parser.add_argument(
        "--chunks", type=_ints, default=(1024, 256), help="sweep chunk sizes, '' for none (default 1024,256)"
    )
    parser.add_argument("--lanes", type=int, default=64, help="lanes per device (default 64)")
    parser.add_argument("--t1", type=float, default=150.0)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--atol", type=float, default=1e-10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after the compiling one (default 3)")
    parser.add_argument("--out", default="benchmarks/results/devices.json", help="JSON output path")
    args = parser.parse_args(argv)
    top = max(args.devices)
    if min(args.devices) < 1 or args.repeats < 1:
        parser.error("need device counts >= 1 and repeats >= 1")
    if min((args.batch,) + args.chunks) < top * args.lanes:
        parser.error(
            f"need batch and chunk >= {top} devices x {args.lanes} lanes, so every device runs the same program"
        )
    _force_devices(top)

    from .gd import run_info  # imports JAX: after XLA_FLAGS is set

    machine = run_info()
    config = dict(
        problem="authors' two-point data, 2-2-2 bias-free ReLU, square loss, Xavier-normal starts of gflow.sweep",
        **{
            k: getattr(args, k)
            for k in ("devices", "batch", "chunks", "lanes", "t1", "rtol", "atol", "seed", "repeats")
        },
        xla_flags=os.environ.get("XLA_FLAGS"),
    )
    records = run(args)
    print_table(records, config, machine)
    save_record(args.out, "devices", config, machine, records)
    return records


if __name__ == "__main__":
    main()
