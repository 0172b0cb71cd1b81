"""Where gflow's steps go on the authors' setting, and what other step rules would save.

Most of gflow's steps on the authors' setting are spent after the last kink, in the
converged tail, where the step of an explicit method is capped by stability (see
``benchmarks/README.md``, "Why not 100×"). This benchmark counts steps, not seconds, for
two ways of taking fewer of them:

- (a) **an L-stable method for the tail.** For the first ``--members`` trajectories of
  the authors' problem (``--seeds`` Xavier-normal initialisations, ``benchmarks.gd``) that
  cross no kink after ``--t0``, end with no unit sliding and have no pre-activation within
  ``1e-6`` of its surface at ``t0`` (a dead neuron stopped on one), the flow from gflow's state
  at ``t0`` to ``t1`` is smooth (the activation pattern is fixed). It is integrated by
  gflow (a new call from that state) and by SciPy's ``solve_ivp`` with DOP853, Radau
  (implicit, L-stable, order 5) and BDF, all at gflow's tolerances, on the NumPy field of
  ``gflow.reference``. Reported per member: steps (and SciPy's field evaluations,
  Jacobians, LU factorisations) and each end point's distance from gflow's whole-run end
  point. The bound: if every member switched, at exactly the best moment, to whichever of
  gflow and Radau takes fewer tail steps, the mean accepted steps of the whole run would
  fall from ``gflow_total`` to ``switched_total`` (``ratio``), before counting what an
  implicit step costs (SciPy's Radau: ~7 field evaluations and ~1 LU factorisation per
  step, and a Jacobian now and then, where a Dopri8 step is 12 field evaluations).
- (b) **the step controller's coefficients.** The whole problem (``--seeds`` members, 0 to
  ``t1``) with each ``pcoeff:icoeff`` pair of ``--pids``: accepted, rejected and total
  loop iterations, and the largest end-point difference from a run at rtol 1e-12.

Run: ``python -m benchmarks.tail [--seeds 288 --members 60 --t0 10 --t1 150 --pids ...]
[--out benchmarks/results/tail.json]``. About 6.5 minutes on 2 busy cores, most of it
SciPy's loops and the compilations (one per controller setting).
"""

from __future__ import annotations

import argparse

import numpy as np

from ._machine import describe, machine_info, save_record

METHODS = ("DOP853", "Radau", "BDF")
ON_SURFACE = 1e-6  # |pre-activation| at t0 below which a member is left out (see _eligible)


def _parse_pids(text):
    """``"p:i,p:i"`` -> ``[(p, i), ...]``."""
    pairs = []
    for item in text.split(","):
        try:
            p, i = (float(v) for v in item.split(":"))
        except ValueError:
            raise SystemExit(f"--pids: expected pcoeff:icoeff pairs separated by commas, got {item!r}") from None
        pairs.append((p, i))
    return pairs


def _eligible(sol, b, t0, X):
    """Member ``b`` crosses no kink at or after ``t0``, ends with no unit sliding, reached
    ``t1``, and has a finite state saved at ``t0`` with every pre-activation clear of its
    surface (``|p| > ON_SURFACE``). A unit that crossed to inactive and stopped there (a
    dead neuron) keeps ``p`` at its surface within round-off; a restart from that state
    alone, without the mode the run carried, may take the other side (member 42 of the
    default run: ``p = 7e-13``, restarts active, ends 2.2e-5 away)."""
    import gflow
    from gflow.reference import preactivations

    count = int(sol.crossings.count[b])
    last = float(np.max(sol.crossings.t[b, :count])) if count else 0.0
    saved = [W[b, 0] for W in sol.ys]
    if not all(np.all(np.isfinite(W)) for W in saved):
        return False
    clear = all(np.min(np.abs(p)) > ON_SURFACE for p in preactivations(saved, X))
    return (
        int(sol.status[b]) == gflow.Status.REACHED_T1
        and last < t0
        and not np.any(sol.final_modes[b] == gflow.events.SLIDING)
        and clear
    )


def tail_steps(params, X, Y, t0, t1, members, rtol, atol):
    """Part (a) of the module docstring."""
    from scipy.integrate import solve_ivp

    import gflow
    from gflow.flow import _unravel_for, ravel
    from gflow.reference import loss_gradient

    whole = gflow.simulate_batch(params, X, Y, t1=t1, saveat=[t0], rtol=rtol, atol=atol)
    eligible = [b for b in range(len(whole.status)) if _eligible(whole, b, t0, X)]
    chosen = eligible[:members]
    if not chosen:
        raise SystemExit(
            f"no member crosses no kink after t0 = {t0:g}, ends without sliding and starts off its surfaces"
        )
    tail = gflow.simulate_batch([W[chosen, 0] for W in whole.ys], X, Y, t1=t1 - t0, rtol=rtol, atol=atol)
    unflatten = _unravel_for([W.shape[1:] for W in params])
    starts, ends, tail_ends = ravel(whole.ys)[:, 0], ravel(whole.params), ravel(tail.params)

    def field(_, theta):
        return -ravel(loss_gradient(unflatten(theta), X, Y))

    rows = []
    for j, b in enumerate(chosen):
        start, end = starts[b], ends[b]
        row = dict(
            member=b,
            gflow_total=int(whole.stats["num_accepted"][b]),
            gflow_tail=int(tail.stats["num_accepted"][j]),
            gflow_tail_rejected=int(tail.stats["num_rejected"][j]),
            gflow_tail_error=float(np.max(np.abs(tail_ends[j] - end))),
        )
        for method in METHODS:
            try:
                s = solve_ivp(field, (t0, t1), start, method=method, rtol=rtol, atol=atol)
            except ValueError as e:
                # SciPy's implicit methods accept a step whose error estimate is NaN
                # (NaN > 1 is false) after their Newton iterates overflow the field; the
                # next field evaluation then meets a non-finite state.
                row[method] = dict(success=False, message=str(e))
                continue
            row[method] = dict(
                success=bool(s.success), steps=len(s.t) - 1, nfev=int(s.nfev), njev=int(s.njev), nlu=int(s.nlu),
                error=float(np.max(np.abs(s.y[:, -1] - end))),
            )  # fmt: skip
        rows.append(row)

    def steps(method):
        return [r[method]["steps"] for r in rows if r[method]["success"]]

    total = np.array([r["gflow_total"] for r in rows], float)
    mine = np.array([r["gflow_tail"] for r in rows], float)
    # A member on which Radau failed keeps gflow's own steps.
    radau = np.array([r["Radau"]["steps"] if r["Radau"]["success"] else np.inf for r in rows])
    switched = total - mine + np.minimum(mine, radau)
    summary = dict(
        members=len(rows), eligible=len(eligible),
        gflow_total_mean=total.mean(), gflow_tail_mean=mine.mean(), gflow_tail_median=float(np.median(mine)),
        **{f"{m}_failed": [r["member"] for r in rows if not r[m]["success"]] for m in METHODS},
        **{f"{m}_tail_mean": float(np.mean(steps(m))) for m in METHODS},
        **{f"{m}_tail_median": float(np.median(steps(m))) for m in METHODS},
        radau_nfev_per_step=float(np.mean([r["Radau"]["nfev"] / r["Radau"]["steps"] for r in rows if r["Radau"]["success"]])),
        radau_nlu_per_step=float(np.mean([r["Radau"]["nlu"] / r["Radau"]["steps"] for r in rows if r["Radau"]["success"]])),
        switched_total_mean=switched.mean(), ratio=total.mean() / switched.mean(),
    )  # fmt: skip
    return dict(rows=rows, summary=summary)


def controller_sweep(params, X, Y, t1, pids, rtol, atol):
    """Part (b) of the module docstring."""
    import gflow

    ref = gflow.simulate_batch(params, X, Y, t1=t1, rtol=1e-12, atol=1e-14)
    rows = []
    for pcoeff, icoeff in pids:
        sol = gflow.simulate_batch(params, X, Y, t1=t1, rtol=rtol, atol=atol, pcoeff=pcoeff, icoeff=icoeff)
        st = sol.stats
        rows.append(
            dict(
                pcoeff=pcoeff, icoeff=icoeff, statuses=sol.message, accepted=int(st["num_accepted"].sum()),
                rejected=int(st["num_rejected"].sum()), iterations=int(st["num_iterations"].sum()),
                iterations_max=int(st["num_iterations"].max()),
                error_vs_tight=float(max(np.max(np.abs(a - b)) for a, b in zip(sol.params, ref.params))),
            )
        )  # fmt: skip
    return rows


def print_tables(res, machine):
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s = res["tail"]["summary"]
    t = Table(title=f"(a) tail steps, t0 -> t1, {s['members']} of {s['eligible']} eligible members")
    for col in ("method", "steps mean", "steps median", "failed (members)"):
        t.add_column(col, justify="right")
    t.add_row("gflow (Dopri8)", f"{s['gflow_tail_mean']:.1f}", f"{s['gflow_tail_median']:.1f}", "")
    for m in METHODS:
        failed = ", ".join(map(str, s[f"{m}_failed"]))
        t.add_row(f"SciPy {m}", f"{s[f'{m}_tail_mean']:.1f}", f"{s[f'{m}_tail_median']:.1f}", failed)
    console.print(t)
    console.print(
        f"whole run: gflow {s['gflow_total_mean']:.1f} accepted steps per member; switched to Radau at the best "
        f"moment {s['switched_total_mean']:.1f} (ratio {s['ratio']:.2f}); Radau: {s['radau_nfev_per_step']:.1f} "
        f"field evaluations and {s['radau_nlu_per_step']:.2f} LU per step"
    )
    t = Table(title="(b) step controller, whole run")
    for col in ("pcoeff", "icoeff", "accepted", "rejected", "iterations", "max per member", "vs rtol 1e-12"):
        t.add_column(col, justify="right")
    for r in res["controller"]:
        t.add_row(
            f"{r['pcoeff']:g}", f"{r['icoeff']:g}", str(r["accepted"]), str(r["rejected"]), str(r["iterations"]),
            str(r["iterations_max"]), f"{r['error_vs_tight']:.1e}",
        )  # fmt: skip
    console.print(t)
    console.print(describe(machine))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tail", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=288, help="Xavier seeds on the authors' data (default 288)")
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0, as benchmarks.gd)")
    parser.add_argument("--members", type=int, default=60, help="members whose tails are compared (default 60)")
    parser.add_argument("--t0", type=float, default=10.0, help="start of the tail (default 10)")
    parser.add_argument("--t1", type=float, default=150.0)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--atol", type=float, default=1e-10)
    parser.add_argument(
        "--pids", default="0.2:0.4,0:0.7,0:1,0.3:0.3,0.4:0.3,0.4:0.4",
        help="pcoeff:icoeff pairs for (b) (default: gflow's 0.2:0.4 first)",
    )  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/tail.json")
    args = parser.parse_args(argv)
    if not 0 < args.t0 < args.t1:
        parser.error(f"--t0: expected 0 < t0 < t1 = {args.t1:g}, got {args.t0:g}")
    for name in ("seeds", "members"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected at least 1, got {getattr(args, name)}")
    pids = _parse_pids(args.pids)
    from .gd import authors_problem

    machine = machine_info()
    params, X, Y = authors_problem(args.seeds, args.seed)
    res = dict(
        tail=tail_steps(params, X, Y, args.t0, args.t1, args.members, args.rtol, args.atol),
        controller=controller_sweep(params, X, Y, args.t1, pids, args.rtol, args.atol),
    )
    print_tables(res, machine)
    save_record(args.out, "tail", vars(args), machine, res)


if __name__ == "__main__":
    main()
