"""What a new architecture costs before its first trajectory: compile time against run time.

Issue 26 ("Compile time"): every (shape, loss, options) is one XLA program, compiled on
its first call and reused for every batch size after (in-process, and across processes
with the command line's persistent cache). This benchmark measures, for each depth and
width of a grid, one ``gflow.simulate`` on a fresh problem twice in one process with the
persistent cache off: the first call pays tracing, compiling and the run, the second the
run alone, so their difference is what a change of architecture costs, in wall time and
in the process's CPU time (every thread; on a shared machine it moves less with the load
than the wall time does). The target the
issue sets is compile ≤ 30 s for depth ≤ 6 and width ≤ 20 on a 2-core CPU.

Problem per shape: ``--points`` unit inputs in R^``--inputs`` (NumPy seed 0), Gaussian
targets, Xavier-normal weights, square loss, default tolerances, ``t1`` (default 1) and
``max_sliding`` = the hidden width. Both calls integrate the same trajectory; the second's
result must equal the first's (checked, or the shape is reported as failed).

Each row also splits the first call's compile into tracing, lowering and XLA's compile,
as JAX times them (``jax.monitoring``), and counts the operations of the program XLA
compiles (the first call's StableHLO, dumped with ``jax_dump_ir_to``, calls inlined as XLA
inlines them): unlike the times, that count is the same on every machine and at every
load, so it tells what a change to the engine did to the program.

With ``--cached`` each shape is also run in two fresh processes that call
``gflow.enable_compilation_cache`` on one new folder: the first finds it empty and
compiles, the second loads the program the first wrote. Their first calls' wall times
side by side (and their ratio) are what the persistent cache saves a Python caller who
reruns a script; the two results must be equal.

Run: ``python -m benchmarks.compile_time [--depths 2,4,6,10] [--widths 2,10,20]
[--points 16] [--cached] [--out benchmarks/results/compile_time.json]``. Each shape is written to
the JSON as soon as it is measured (atomically), with the load average before and after,
since compile time on a shared machine moves with the load.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ._machine import describe, machine_info, save_record
from .through import _problem


def shape_problem(depth, width, n, inputs):
    """The problem of one shape (module docstring): ``(params, X, Y)``."""
    return _problem(0, (inputs,) + (width,) * (depth - 1) + (1,), n)


def first_call(folder, depth, width, n, inputs, t1):
    """In this process: the persistent cache on in ``folder``, then one ``gflow.simulate``
    of the shape, timed; ``(wall seconds, final weights)``."""
    import gflow

    gflow.enable_compilation_cache(folder)
    params, X, Y = shape_problem(depth, width, n, inputs)
    start = time.perf_counter()
    sol = gflow.simulate(params, X, Y, t1=t1, max_sliding=width, throw=False)
    return time.perf_counter() - start, [np.asarray(W).tolist() for W in sol.params]


def cached_first_calls(depth, width, n, inputs, t1):
    """The first call of two fresh processes on one new cache folder (the first compiles
    and writes, the second loads)."""
    walls, results = [], []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(2):
            args = [str(v) for v in (folder, depth, width, n, inputs, t1)]
            code = (
                "import json, sys; from benchmarks.compile_time import first_call; "
                "print(json.dumps(first_call(sys.argv[1], *map(int, sys.argv[2:6]), float(sys.argv[6]))))"
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "GFLOW_CACHE"))}
            proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
            if proc.returncode:
                raise RuntimeError(f"the child process failed:\n{proc.stdout}{proc.stderr}")
            wall, params = json.loads(proc.stdout.strip().splitlines()[-1])
            walls.append(wall)
            results.append(params)
    return dict(first_call_empty_cache_s=walls[0], first_call_cached_s=walls[1], cache_ratio=walls[0] / walls[1],
                cached_identical=results[0] == results[1])  # fmt: skip


def measure(depth, width, n, inputs, t1):
    """One shape: (first call, second call) wall times and the run's figures."""
    import jax

    import gflow

    params, X, Y = shape_problem(depth, width, n, inputs)
    widths = (inputs,) + tuple(W.shape[0] for W in params)
    load0 = os.getloadavg()[0]
    walls, cpus, sols = [], [], []
    _listen_to_phases()
    _PHASES.clear()
    with tempfile.TemporaryDirectory() as dump:
        for call in range(2):
            if call == 0:  # the first call's programs, as XLA receives them
                jax.config.update("jax_include_debug_info_in_dumps", False)
                jax.config.update("jax_dump_ir_to", dump)
            start, cpu = time.perf_counter(), time.process_time()
            sol = gflow.simulate(params, X, Y, t1=t1, max_sliding=width, throw=False)
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
            jax.config.update("jax_dump_ir_to", "")
            sols.append(sol)
            if call == 0:
                phases = {name: sum(_PHASES[event]) for name, event in _PHASE_EVENTS.items()}
        ops = max(inlined_ops(path.read_text()) for path in Path(dump).glob("*.mlir"))
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(sols[0].params, sols[1].params))
    sol = sols[0]
    return dict(
        depth=depth,
        width=width,
        widths=list(widths),
        points=n,
        preactivations=n * width * (depth - 1),
        first_call_s=walls[0],
        run_s=walls[1],
        compile_s=walls[0] - walls[1],
        compile_cpu_s=cpus[0] - cpus[1],
        **phases,
        operations=ops,
        status=sol.status.name,
        t=float(sol.t),
        iterations=int(sol.stats["num_iterations"]),
        events=int(sol.stats["num_events"]),
        repeat_identical=bool(same),
        load_before=load0,
        load_after=os.getloadavg()[0],
    )


# The first call's compile split by phase, as JAX itself times them (``jax.monitoring``),
# summed over the programs that call compiles: tracing to jaxprs, lowering them to
# StableHLO (both Python), and XLA's compile (HLO passes and code generation).
_PHASE_EVENTS = {
    "trace_s": "/jax/core/compile/jaxpr_trace_duration",
    "lower_s": "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "xla_s": "/jax/core/compile/backend_compile_duration",
}
_PHASES = collections.defaultdict(list)


def _record_phase(event, duration, **_):
    _PHASES[event].append(duration)


@functools.cache
def _listen_to_phases():
    import jax

    jax.monitoring.register_event_duration_secs_listener(_record_phase)


def inlined_ops(module):
    """Operations in a StableHLO module's ``main`` with every call inlined (XLA inlines
    them): what XLA compiles, a count that does not move with the machine's load."""
    own, calls, current = collections.Counter(), collections.defaultdict(list), None
    for line in module.splitlines():
        head = re.match(r"\s*func\.func (?:private |public )?@(\S+)\(", line)
        if head:
            current = head.group(1)
        elif current is not None:
            own[current] += bool(re.match(r"\s*(%\S+ = )?\"?[a-z_]+\.[a-z_]+", line))
            calls[current] += re.findall(r"\bcall @([\w.\-]+)", line)

    @functools.cache
    def size(name):
        return own[name] + sum(size(callee) for callee in calls[name])

    return size("main")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_time", description=__doc__.split("\n")[0])
    parser.add_argument("--depths", default="2,4,6,10", help="comma-separated depths (layers), default 2,4,6,10")
    parser.add_argument("--widths", default="2,10,20", help="comma-separated hidden widths, default 2,10,20")
    parser.add_argument("--points", type=int, default=16)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--t1", type=float, default=1.0)
    parser.add_argument("--cached", action="store_true", help="also: first calls with an empty and a filled cache")
    parser.add_argument("--out", default="benchmarks/results/compile_time.json")
    args = parser.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    widths = [int(w) for w in args.widths.split(",")]
    for name, values, low in (("--depths", depths, 2), ("--widths", widths, 1)):
        if min(values) < low:
            parser.error(f"{name}: expected integers >= {low}, got {values}")

    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", None)  # every compile measured, none read from disk
    info = machine_info()
    config = dict(depths=depths, widths=widths, points=args.points, inputs=args.inputs, t1=args.t1, cached=args.cached)
    print(
        f"{'depth':>5} {'width':>5} {'P':>6} {'operations':>10} {'compile s':>10} {'cpu s':>7} {'trace':>6} {'lower':>6} {'XLA':>6} {'run s':>8} {'status':>14} {'events':>6} {'load':>9}"
    )
    rows = []
    for depth in depths:
        for width in widths:
            row = measure(depth, width, args.points, args.inputs, args.t1)
            if args.cached:
                row.update(cached_first_calls(depth, width, args.points, args.inputs, args.t1))
            rows.append(row)
            print(
                f"{depth:>5} {width:>5} {row['preactivations']:>6} {row['operations']:>10,} {row['compile_s']:>10.1f} {row['compile_cpu_s']:>7.1f} "
                f"{row['trace_s']:>6.1f} {row['lower_s']:>6.1f} {row['xla_s']:>6.1f} {row['run_s']:>8.2f} "
                f"{row['status']:>14} {row['events']:>6} {row['load_before']:>4.1f}-{row['load_after']:<4.1f}"
                + ("" if row["repeat_identical"] else "  (second call differs!)")
                + (
                    f"\n{'':>11} new process, first call: {row['first_call_empty_cache_s']:.1f} s with an empty "
                    f"cache, {row['first_call_cached_s']:.1f} s with it filled ({row['cache_ratio']:.1f}x)"
                    + ("" if row["cached_identical"] else "  (results differ!)")
                    if args.cached
                    else ""
                ),
                flush=True,
            )
            save_record(args.out, "compile_time", config, info, rows)
    print(describe(info))


if __name__ == "__main__":
    main()
