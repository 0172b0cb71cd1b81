"""gflow's batch benchmark on a CUDA GPU, at batch sizes up to 10^6.

The problem is the authors' experiment (SPEC §4): their two-point data, a 2-2-2 bias-free
ReLU network, square loss, ``B`` Xavier-normal initialisations
(``jax.random.PRNGKey(seed)``), ``t1 = 150``, gflow at ``--rtol``/``--atol`` (default
gflow's own ``1e-8``/``1e-10``). For each batch size:

- gflow: for each ``--lanes`` value (default ``all``: every trajectory in its own lane,
  the whole batch at once; gflow's own default of 16 lanes per device suits a CPU core,
  not a GPU), the first :func:`gflow.simulate_batch` call (compile + run), then ``--repeats``
  timed calls (results come back as NumPy arrays, so they are synchronised); throughput
  = ``B`` / median wall time; statuses, events, steps, loop iterations; the device's peak
  memory (``jax.Device.memory_stats()['peak_bytes_in_use']`` where the backend reports
  it) and the host's peak resident set (``ru_maxrss``).
- the authors' recipe in JAX (``gflow.reference.gradient_descent_batch``, the batch
  vectorised and split over the same devices as gflow, :func:`benchmarks.gd.gd_batch`;
  lr ``5e-5`` on ``L`` = MSE lr ``1e-4``): ``--gd-steps`` steps timed after a
  compiling call and **extrapolated linearly to 3·10⁶ steps** (the loop's cost per step
  is constant); the ratio recipe / gflow.
- agreement: the first ``--check`` members rerun at ``rtol 1e-12, atol 1e-14``; the largest
  difference of the final weights.
- against the CPU (``--reference FILE``): end points, statuses and event counts of the
  first members computed on a CPU at the same settings (made there with
  ``--write-reference FILE``); the largest weight difference and how many members end
  with another status or another number of events.

On a machine whose JAX backend is not a GPU the script refuses (exit status 2) unless
``--allow-cpu`` is given, which runs it at tiny batch sizes (``16,64`` unless
``--batches`` says otherwise) and writes its JSON to the temporary folder unless ``--out``
says otherwise, so that a CPU run never stands in for a GPU result. Results are printed
with Rich and written atomically to JSON (default ``benchmarks/results/gpu.json``) with
the machine and package versions; the file is rewritten after each batch size, so a run
cut short keeps the sizes it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

GPU_BATCHES = (288, 1_000, 10_000, 100_000, 1_000_000)
CPU_BATCHES = (16, 64)
RECIPE_STEPS = 3_000_000
RECIPE_LR = 5e-5  # on L = ½Σ‖·‖², i.e. MSE lr 1e-4


def _ints(s):
    return tuple(int(float(v)) for v in s.split(","))


def _peak_device_bytes(device):
    try:
        stats = device.memory_stats()
    except Exception:  # some backends raise instead of returning None
        return None
    if not stats:
        return None
    return stats.get("peak_bytes_in_use")


def _mean_max(a):
    import numpy as np

    a = np.asarray(a, dtype=float)
    return {"mean": float(np.mean(a)), "max": float(np.max(a))}


def _lanes(s):
    """``--lanes``: comma-separated ints or ``all`` (= the batch size)."""
    return tuple(None if v.strip() == "all" else int(float(v)) for v in s.split(","))


def bench_one(B, lanes, args, log):
    """Every figure for one batch size and one lane count (``None``: all ``B``)."""
    import jax
    import numpy as np

    import gflow

    from .gd import authors_problem, gd_batch

    params, X, Y = authors_problem(B, args.seed)
    L = B if lanes is None else min(lanes, B)
    kw = dict(loss="square", t1=args.t1, rtol=args.rtol, atol=args.atol, lanes=L)
    start = time.perf_counter()
    sol = gflow.simulate_batch(params, X, Y, **kw)
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        sol = gflow.simulate_batch(params, X, Y, **kw)
        times.append(time.perf_counter() - start)
    wall = statistics.median(times)
    log(f"[B={B}, lanes={L}] gflow: first call {first:.2f} s, median {wall:.3f} s")
    status = {gflow.Status(int(c)).name: int(np.sum(sol.status == c)) for c in np.unique(sol.status)}

    # The recipe in JAX, timed on --gd-steps steps and extrapolated to 3e6.
    gd = None
    if args.gd_steps:
        gd_batch(params, X, Y, lr=RECIPE_LR, steps=2)  # compile
        start = time.perf_counter()
        gd_batch(params, X, Y, lr=RECIPE_LR, steps=args.gd_steps)
        sec = time.perf_counter() - start
        per_step = sec / args.gd_steps
        gd = dict(
            steps_timed=args.gd_steps,
            seconds=sec,
            us_per_step=per_step * 1e6,
            recipe_s_extrapolated=per_step * RECIPE_STEPS,
            ratio_recipe_over_gflow=per_step * RECIPE_STEPS / wall,
            note=f"timed for {args.gd_steps} steps, extrapolated linearly to {RECIPE_STEPS}",
        )
        log(f"[B={B}] JAX GD: {per_step * 1e6:.2f} µs/step, recipe ≈ {per_step * RECIPE_STEPS:.1f} s")

    # Agreement with a tight run on the first --check members.
    check = None
    c = min(args.check, B)
    if c:
        sub = [W[:c] for W in params]
        tight = gflow.simulate_batch(sub, X, Y, loss="square", t1=args.t1, rtol=1e-12, atol=1e-14, lanes=c)
        diff = max(float(np.max(np.abs(a[:c] - b))) for a, b in zip(sol.params, tight.params))
        check = dict(members=c, rtol=1e-12, atol=1e-14, max_abs_weight_diff=diff)
    against_cpu = None
    if args.reference:
        against_cpu = compare_reference(args.reference, sol, args)
        log(f"[B={B}] against the CPU: {against_cpu}")
    dev = jax.devices()[0]
    return dict(
        batch=B,
        lanes=L,
        devices=len(jax.local_devices()),
        first_call_s=first,
        timed_s=times,
        wall_s=wall,
        throughput_per_s=B / wall,
        status=status,
        all_success=bool(all(gflow.Status(int(s)).success for s in sol.status)),
        events=_mean_max(sol.crossings.count),
        accepted_steps=_mean_max(sol.stats["num_accepted"]),
        rejected_steps=_mean_max(sol.stats["num_rejected"]),
        iterations=_mean_max(sol.stats["num_iterations"]),
        device_peak_bytes=_peak_device_bytes(dev),
        host_peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        gd=gd,
        agreement=check,
        against_cpu=against_cpu,
    )


def _settings(args):
    """What a CPU reference must share with the run it is compared with."""
    import numpy as np

    return np.array([args.seed, args.t1, args.rtol, args.atol])


def _endpoints(sol, n):
    import numpy as np

    out = {f"W{i}": np.asarray(W[:n]) for i, W in enumerate(sol.params)}
    out["status"] = np.asarray(sol.status[:n])
    out["events"] = np.asarray(sol.crossings.count[:n])
    return out


def write_reference(path, args):
    """End points of the first ``--check`` members at this run's settings, for
    ``--reference`` on another machine; with the settings and the machine, versions and
    commit that made them (``provenance``, JSON)."""
    import jax
    import numpy as np

    import gflow

    from .gd import authors_problem, run_info

    n = args.check
    params, X, Y = authors_problem(n, args.seed)
    sol = gflow.simulate_batch(params, X, Y, loss="square", t1=args.t1, rtol=args.rtol, atol=args.atol)
    settings = _settings(args)

    provenance = json.dumps(dict(settings="seed, t1, rtol, atol", machine=run_info()))
    tmp = f"{path}.tmp.npz"
    np.savez(
        tmp, settings=settings, backend=np.array(jax.default_backend()), provenance=np.array(provenance),
        **_endpoints(sol, n),
    )  # fmt: skip
    os.replace(tmp, path)
    print(f"wrote {path}: {n} members on {jax.default_backend()}")


def compare_reference(path, sol, args):
    """Largest weight difference, and members with another status or event count, between
    this run and the end points in ``path`` (same seed, ``t1``, tolerances)."""
    import numpy as np

    ref = np.load(path)
    want = _settings(args)
    if not np.array_equal(ref["settings"], want):
        raise ValueError(
            f"--reference {path!r} was made with seed, t1, rtol, atol = {ref['settings'].tolist()}, "
            f"expected {want.tolist()} (this run's)"
        )
    n = min(len(ref["status"]), len(sol.status))
    got = _endpoints(sol, n)
    k = sum(1 for key in ref.files if key.startswith("W"))
    diff = max(float(np.max(np.abs(got[f"W{i}"] - ref[f"W{i}"][:n]))) for i in range(k))
    return dict(
        members=n,
        reference_backend=str(ref["backend"]),
        max_abs_weight_diff=diff,
        other_status=int(np.sum(got["status"] != ref["status"][:n])),
        other_event_count=int(np.sum(got["events"] != ref["events"][:n])),
    )


def print_table(results, machine, config):
    from rich.console import Console
    from rich.table import Table

    from ._machine import describe

    t = Table(
        title=(
            f"gflow batch benchmark on {machine['jax_backend']} ({', '.join(machine['jax_devices'])}); "
            f"authors' 2-2-2, t1={config['t1']:g}, rtol={config['rtol']:g}, atol={config['atol']:g}"
        )
    )
    for col in (
        "B",
        "lanes",
        "compile+1st s",
        "wall s",
        "traj/s",
        "iters mean/max",
        "events mean",
        "status",
        "device peak GiB",
        "JAX recipe s (extrap.)",
        "recipe / gflow",
        "max |Δθ| vs 1e-12",
        "max |Δθ| vs CPU",
    ):
        t.add_column(col, justify="right")
    for r in results:
        gd = r["gd"]
        t.add_row(
            f"{r['batch']:,}",
            f"{r['lanes']:,}",
            f"{r['first_call_s']:.1f}",
            f"{r['wall_s']:.3f}",
            f"{r['throughput_per_s']:,.0f}",
            f"{r['iterations']['mean']:.0f} / {r['iterations']['max']:.0f}",
            f"{r['events']['mean']:.2f}",
            ", ".join(f"{k} {v}" for k, v in r["status"].items()),
            "n/a" if r["device_peak_bytes"] is None else f"{r['device_peak_bytes'] / 2**30:.2f}",
            "n/a" if gd is None else f"{gd['recipe_s_extrapolated']:.1f}",
            "n/a" if gd is None else f"{gd['ratio_recipe_over_gflow']:.1f}×",
            "n/a" if r["agreement"] is None else f"{r['agreement']['max_abs_weight_diff']:.2g}",
            "n/a" if r["against_cpu"] is None else f"{r['against_cpu']['max_abs_weight_diff']:.2g}",
        )
    console = Console(width=160)
    console.print(t)
    console.print(describe(machine))


def main(argv=None):
    from .gd import run_info  # first: it sets XLA_FLAGS before JAX is imported

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--batches", type=_ints, help="batch sizes (default 288,1000,10000,100000,1000000; 16,64 on CPU)"
    )
    parser.add_argument("--t1", type=float, default=150.0)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--atol", type=float, default=1e-10)
    parser.add_argument(
        "--lanes",
        type=_lanes,
        default=(None,),
        help="gflow lanes per device, comma-separated ints or 'all' (= B, every trajectory at once; default all)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="timed gflow calls per batch size (default 2)")
    parser.add_argument("--gd-steps", type=int, default=10_000, help="JAX GD steps timed per batch size (0 skips)")
    parser.add_argument("--check", type=int, default=1000, help="members rerun at rtol 1e-12 (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", help="npz of CPU end points (--write-reference) to compare with")
    parser.add_argument(
        "--write-reference", metavar="FILE", help="write the first --check members' end points to FILE and stop"
    )
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU backend (tiny sizes by default)")
    parser.add_argument(
        "--out",
        default=None,
        help="JSON output (default benchmarks/results/gpu.json on a GPU; a file in the temp folder on a CPU)",
    )
    args = parser.parse_args(argv)

    import jax

    import gflow  # noqa: F401  (enables float64 before any array is made)

    backend = jax.default_backend()
    if args.write_reference:
        write_reference(args.write_reference, args)
        return 0
    if backend != "gpu" and not args.allow_cpu:
        print(
            f"benchmarks.gpu: JAX's backend here is {backend!r} ({', '.join(str(d) for d in jax.devices())}), not a "
            "CUDA GPU, so this benchmark does not run. On a GPU machine install JAX with CUDA "
            "(pip install 'jax[cuda12]') and run it again; to try it here at tiny sizes, pass --allow-cpu.",
            file=sys.stderr,
        )
        return 2
    batches = args.batches or (GPU_BATCHES if backend == "gpu" else CPU_BATCHES)
    if args.out is None:  # a CPU smoke run must not pass for a GPU result
        args.out = (
            "benchmarks/results/gpu.json"
            if backend == "gpu"
            else os.path.join(tempfile.gettempdir(), "gflow_gpu_benchmark_cpu.json")
        )

    def log(msg):
        print(msg, flush=True)

    machine = run_info()
    machine["gpu"] = [getattr(d, "device_kind", str(d)) for d in jax.devices()]
    config = dict(
        problem="authors' two-point data (gflow.theory.authors_data), 2-2-2 bias-free ReLU, square loss",
        init="xavier_normal",
        batches=list(batches),
        lanes=["all" if v is None else v for v in args.lanes],
        t1=args.t1,
        rtol=args.rtol,
        atol=args.atol,
        repeats=args.repeats,
        gd_steps=args.gd_steps,
        recipe=f"JAX GD lr {RECIPE_LR} on L (= MSE lr 1e-4), {RECIPE_STEPS} steps, extrapolated from gd_steps",
        check=args.check,
        reference=args.reference,
        seed=args.seed,
        backend=backend,
        allow_cpu=args.allow_cpu,
    )
    from ._machine import save_record

    start = time.perf_counter()
    results = []
    for B in batches:
        seen = set()
        for lanes in args.lanes:
            L = B if lanes is None else min(lanes, B)
            if L not in seen:
                seen.add(L)
                results.append(bench_one(B, lanes, args, log))
        save_record(
            args.out,
            "gpu",
            config,
            machine,
            dict(records=results, benchmark_wall_s=time.perf_counter() - start, complete=B == batches[-1]),
        )
    print_table(results, machine, config)
    total = time.perf_counter() - start
    print(f"benchmark wall time {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
