"""Stopping at every kink (``events="stop"``) against integrating through kinks (``"through"``).

Issue 4 asks what the through mode costs in accuracy and buys in speed on larger
networks. For each problem both modes integrate the same batch with the same tolerances,
side by side in one process (compiled first, then timed), and we report per mode:

- wall time (median of ``--repeats`` compiled runs) and the ratio stop / through;
- accepted + rejected steps and recorded events per trajectory;
- the SPEC §3 drift: ``max |q(t1) − q(0)·e^{−2λt1}| / scale`` over the balance invariants
  ``q = ‖W_l[j,:]‖² − ‖W_{l+1}[:,j]‖²`` (exact flow: 0; both modes see it only through
  their integration error);
- the distance between the two modes' end points, and between each and the SciPy
  reference (``gflow.reference.scipy_flow``, DOP853 at rtol 1e-12) on the members that
  reference can integrate (it stops when a unit starts sliding).

Problems (random unit inputs, Gaussian targets, Xavier-normal weights):
``crossing``: depth 3, widths (3, 3, 3, 2), n = 4, t1 = 2, the members of 24 random
problems that do not slide (so both modes follow the same classical flow);
``deep``: depth 6, widths (4, 8, 8, 8, 8, 8, 1), n = 10, t1 = 1, 4 members, where units
slide (the through mode then chatters across those surfaces).

Run: ``python -m benchmarks.through [--repeats 3] [--out benchmarks/results/through.json]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ._machine import describe, machine_info, save_record


def _problem(seed, widths, n):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, widths[0]))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    params = [rng.normal(size=(o, i)) * np.sqrt(2.0 / (i + o)) for i, o in zip(widths[:-1], widths[1:])]
    Y = rng.normal(size=(n, widths[-1]))
    return params, X, Y


def _reference(p, X, Y, t1):
    """SciPy's event-driven flow, or None where it gives up (a unit chattering at a kink)."""
    from gflow.reference import scipy_flow

    try:
        return scipy_flow(p, X, Y, t1=t1, rtol=1e-12, atol=1e-14)
    except RuntimeError:
        return None


def run_problem(name, widths, n, t1, seeds, repeats, rtol, atol, only_non_sliding):
    import gflow
    from gflow.reference import balance_drift

    problems = [_problem(s, widths, n) for s in seeds]
    refs = [None] * len(problems)
    if only_non_sliding:
        refs = [_reference(p, X, Y, t1) for p, X, Y in problems]
        keep = [b for b, r in enumerate(refs) if r is not None and not r.slid]
        problems, refs = [problems[b] for b in keep], [refs[b] for b in keep]
    k = len(widths) - 1
    params = [np.stack([p[ell] for p, _, _ in problems]) for ell in range(k)]
    X = np.stack([x for _, x, _ in problems])
    Y = np.stack([y for _, _, y in problems])
    out = dict(problem=name, widths=list(widths), n=n, t1=t1, members=len(problems), rtol=rtol, atol=atol)
    sols = {}
    for mode in ("stop", "through"):
        kw = dict(t1=t1, rtol=rtol, atol=atol, events=mode, max_steps=20_000, max_sliding=16)
        t = time.perf_counter()
        sol = gflow.simulate_batch(params, X, Y, **kw)
        compile_s = time.perf_counter() - t
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            sol = gflow.simulate_batch(params, X, Y, **kw)
            times.append(time.perf_counter() - t)
        sols[mode] = sol
        members = [[W[b] for W in sol.params] for b in range(len(problems))]
        drift = [balance_drift(p, m) for (p, _, _), m in zip(problems, members)]
        ref_err = (
            max(max(float(np.max(np.abs(a - r))) for a, r in zip(m, ref.params)) for m, ref in zip(members, refs))
            if refs[0] is not None
            else None
        )
        out[mode] = dict(
            wall_s=statistics.median(times), first_call_s=compile_s,
            statuses={gflow.Status(int(s)).name: int(np.sum(sol.status == s)) for s in np.unique(sol.status)},
            steps_per_traj=float(np.mean(sol.stats["num_accepted"] + sol.stats["num_rejected"])),
            events_per_traj=float(np.mean(sol.stats["num_events"])), max_drift=max(drift),
            max_error_vs_scipy=ref_err, t_reached=float(np.min(sol.t)),
        )  # fmt: skip
    out["time_ratio_stop_over_through"] = out["stop"]["wall_s"] / out["through"]["wall_s"]
    out["max_endpoint_difference"] = max(
        float(np.max(np.abs(a - b))) for a, b in zip(sols["stop"].params, sols["through"].params)
    )
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rtol", type=float, default=1e-10)
    parser.add_argument("--atol", type=float, default=1e-12)
    parser.add_argument("--out", default="benchmarks/results/through.json")
    args = parser.parse_args(argv)
    import gflow  # noqa: F401  (float64)

    machine = machine_info()
    results = [
        run_problem("crossing", (3, 3, 3, 2), 4, 2.0, range(24), args.repeats, args.rtol, args.atol, True),
        run_problem("deep", (4, 8, 8, 8, 8, 8, 1), 10, 1.0, range(4), args.repeats, args.rtol, args.atol, False),
    ]
    print(f"{'problem':10} {'mode':8} {'wall s':>9} {'steps/traj':>11} {'events/traj':>12} {'§3 drift':>9} "
          f"{'vs SciPy':>9}  statuses")  # fmt: skip
    for r in results:
        for mode in ("stop", "through"):
            m = r[mode]
            ref = "—" if m["max_error_vs_scipy"] is None else f"{m['max_error_vs_scipy']:.1e}"
            print(f"{r['problem']:10} {mode:8} {m['wall_s']:9.3f} {m['steps_per_traj']:11.0f} "
                  f"{m['events_per_traj']:12.1f} {m['max_drift']:9.1e} {ref:>9}  {m['statuses']}")  # fmt: skip
        print(f"{'':10} time stop/through = {r['time_ratio_stop_over_through']:.2f}; "
              f"max |θ_stop − θ_through| = {r['max_endpoint_difference']:.1e} ({r['members']} members)")  # fmt: skip
    print(describe(machine))
    save_record(args.out, "through", vars(args), machine, results)


if __name__ == "__main__":
    main()
