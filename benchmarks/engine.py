"""Throughput and accuracy of gflow's engine against the SciPy reference.

The problem is the authors' experiment (SPEC §4): two points, a 2-2-2 bias-free ReLU
network, square loss, Xavier-normal initialisations, gradient-flow time ``t1 = 150``.

- gflow: one :func:`gflow.simulate_batch` call over all ``B`` initialisations, split over
  one JAX CPU device per core (``XLA_FLAGS=--xla_force_host_platform_device_count``, set
  below unless the caller set it), 64 lanes each. The first
  call compiles; the timed calls after it reuse the compiled program. Throughput is
  ``B`` divided by the median wall time of the timed calls.
- SciPy: :func:`gflow.reference.scipy_flow` (DOP853, event-driven, one trajectory at a
  time) at the same ``rtol``/``atol`` on the first ``--scipy-sample`` of the same
  initialisations, each call timed. Its cost is linear in the number of trajectories, so
  its throughput on ``B`` is extrapolated from the sample. ``scipy_flow`` cannot
  integrate Filippov sliding and stops where a slide starts, which makes such a
  trajectory cheaper for it than the full one; SciPy's throughput is therefore computed
  over the non-sliding trajectories of the sample only.
- Agreement: for every non-sliding trajectory of the sample, the largest absolute
  difference of the final weights, whether the crossings are the same (layer, neuron,
  point, direction, in order) and the largest difference of their times. For sliding
  ones, the slide start time and the crossings before it.

Run ``python -m benchmarks.engine --help`` for the options. Results are printed as a table
and written to a JSON file (default ``benchmarks/results/engine.json``).
"""

from __future__ import annotations

import os

# gflow splits a batch over all local JAX devices. On a CPU, JAX shows one device unless
# asked to expose one per core; that must happen before JAX is imported. An XLA_FLAGS
# already set by the caller is respected.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={os.cpu_count() or 1}"
    ).strip()

import argparse  # noqa: E402
import os
import statistics
import time

import jax
import numpy as np

import gflow
from gflow import reference, theory

from ._machine import describe, machine_info, save_record

# The issue's target for this benchmark (2-core CPU).
TARGET_RATIO = 30.0
TARGET_AGREEMENT = 1e-7


def make_problem(batch: int, seed: int):
    """The authors' two-point data and ``batch`` Xavier-normal 2-2-2 initialisations.

    Returns:
        ``(params, X, Y)``: ``params`` a list of NumPy arrays ``(batch, 2, 2)``; ``X``, ``Y``
        of shape ``(2, 2)``.
    """
    X, Y = theory.authors_data()
    params = gflow.init_params(jax.random.PRNGKey(seed), (2, 2, 2), "xavier_normal", batch=batch)
    return [np.asarray(W) for W in params], X, Y


def run_gflow(params, X, Y, *, t1, rtol, atol, repeats):
    """Compile and run once, then time ``repeats`` more calls.

    Returns:
        ``(solution, first_call_s, times_s)``: the last call's solution, the wall time of
        the first call (compile + run) and of each timed call.
    """
    kw = dict(loss="square", t1=t1, rtol=rtol, atol=atol)
    start = time.perf_counter()
    sol = gflow.simulate_batch(params, X, Y, **kw)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sol = gflow.simulate_batch(params, X, Y, **kw)  # returns NumPy arrays: already synchronised
        times.append(time.perf_counter() - start)
    return sol, first, times


def run_scipy(params, X, Y, *, sample, t1, rtol, atol):
    """:func:`gflow.reference.scipy_flow` on members ``0 .. sample-1``, each timed.

    One untimed call on member 0 first, so that no one-off cost (imports, caches) is
    charged to SciPy.

    Returns:
        A list of ``(result or None, seconds, error message or None)``, one per member.
    """
    try:
        reference.scipy_flow([W[0] for W in params], X, Y, loss="square", t1=t1, rtol=rtol, atol=atol)
    except RuntimeError:
        pass  # reported below, when member 0 is timed
    out = []
    for b in range(sample):
        p = [W[b] for W in params]
        start = time.perf_counter()
        try:
            res, err = reference.scipy_flow(p, X, Y, loss="square", t1=t1, rtol=rtol, atol=atol), None
        except RuntimeError as e:  # a failure of the reference is reported, not fatal
            res, err = None, str(e)
        out.append((res, time.perf_counter() - start, err))
    return out


def _events(sol_b):
    """gflow's events of one trajectory as (t, layer, neuron, point, direction, kind-name)."""
    return [(r["t"], r["layer"], r["neuron"], r["point"], r["direction"], r["kind"]) for r in sol_b.crossings.rows()]


def _match_crossings(ours, theirs):
    """Compare two lists of crossings ``(t, layer, neuron, point, direction)``.

    Same identities in the same order, or (for events that fall at one instant, whose
    order is arbitrary) the same identities once sorted. Returns ``(same, max |Δt|)``
    (``max |Δt|`` is NaN when the identities differ, 0 when there are none).
    """
    if len(ours) != len(theirs):
        return False, float("nan")
    if [c[1:] for c in ours] != [c[1:] for c in theirs]:
        ours, theirs = sorted(ours, key=lambda c: c[1:]), sorted(theirs, key=lambda c: c[1:])
        if [c[1:] for c in ours] != [c[1:] for c in theirs]:
            return False, float("nan")
    return True, max((abs(a[0] - b[0]) for a, b in zip(ours, theirs, strict=True)), default=0.0)


def compare(sol, scipy_runs):
    """Agreement of gflow with SciPy on the sampled trajectories.

    Returns a dict of per-trajectory records and summaries (see the module docstring).
    """
    records = []
    for b, (res, seconds, err) in enumerate(scipy_runs):
        s = sol[b]
        events = _events(s)
        rec = dict(
            index=b,
            scipy_seconds=seconds,
            scipy_error=err,
            gflow_status=s.status.name,
            gflow_events=[e[5] for e in events],
        )
        if res is None:
            records.append(rec)
            continue
        rec.update(slid=bool(res.slid), scipy_t=float(res.t), scipy_nfev=int(res.nfev))
        theirs = [tuple(c) for c in res.crossings]
        if not res.slid:
            ours = [e[:5] for e in events if e[5] == "cross"]
            others = [e[5] for e in events if e[5] not in ("cross", "touch")]
            same, dt = _match_crossings(ours, theirs)
            rec.update(
                weight_diff=float(max(np.max(np.abs(a - c)) for a, c in zip(s.params, res.params, strict=True))),
                crossings_match=same and not others,
                crossing_time_diff=dt,
                n_crossings=len(theirs),
                unexpected_gflow_events=others,
            )
        else:
            # SciPy stops at the first slide: compare the crossings before it and its time.
            starts = [e for e in events if e[5] == "slide_start"]
            t_slide = starts[0][0] if starts else float("nan")
            ours = [e[:5] for e in events if e[5] == "cross" and (not starts or e[0] <= t_slide)]
            same, dt = _match_crossings(ours, theirs)
            rec.update(
                crossings_match=same and bool(starts),
                crossing_time_diff=dt,
                slide_time_diff=abs(t_slide - float(res.t)),
                n_crossings=len(theirs),
            )
        records.append(rec)

    smooth = [r for r in records if r.get("slid") is False]
    slid = [r for r in records if r.get("slid") is True]

    def worst(rows, key):
        """Largest value of ``key`` over ``rows``; NaN if any is NaN; None if there are no rows."""
        vals = np.array([r[key] for r in rows], dtype=float)
        return None if vals.size == 0 else float(np.nan if np.isnan(vals).any() else vals.max())

    return dict(
        records=records,
        n_compared=len(smooth),
        n_slid=len(slid),
        n_scipy_errors=sum(r["scipy_error"] is not None for r in records),
        max_weight_diff=worst(smooth, "weight_diff"),
        crossing_mismatches=[r["index"] for r in smooth if not r["crossings_match"]],
        max_crossing_time_diff=worst([r for r in smooth if r["crossings_match"]], "crossing_time_diff"),
        sliding_mismatches=[r["index"] for r in slid if not r["crossings_match"]],
        max_slide_time_diff=worst(slid, "slide_time_diff"),
        gflow_failures_in_sample=[r["index"] for r in records if not gflow.Status[r["gflow_status"]].success],
    )


def _mean_max(a):
    a = np.asarray(a)
    return {"mean": float(np.mean(a)), "max": float(np.max(a))}


def summarise(args, sol, first, times, scipy_runs, agreement):
    """Every measured number, JSON-serialisable."""
    B = args.batch
    gflow_s = statistics.median(times)
    status_counts = {gflow.Status(int(c)).name: int(np.sum(sol.status == c)) for c in np.unique(sol.status)}
    smooth = [(res, sec) for res, sec, err in scipy_runs if res is not None and not res.slid]
    all_ok = [(res, sec) for res, sec, err in scipy_runs if res is not None]
    smooth_s = sum(sec for _, sec in smooth)
    scipy_tp = len(smooth) / smooth_s if smooth else float("nan")
    all_s = sum(sec for _, sec in all_ok)
    gflow_tp = B / gflow_s
    max_dw = agreement["max_weight_diff"]
    max_dt = agreement["max_crossing_time_diff"]
    agrees = (
        max_dw is not None
        and max_dw <= TARGET_AGREEMENT
        and not agreement["crossing_mismatches"]
        and max_dt is not None
        and max_dt <= TARGET_AGREEMENT
        and not agreement["gflow_failures_in_sample"]
        and agreement["n_scipy_errors"] == 0
    )
    ratio = gflow_tp / scipy_tp
    return dict(
        gflow=dict(
            first_call_s=first,
            timed_calls_s=times,
            wall_s=gflow_s,
            compile_s_estimate=first - gflow_s,
            throughput_per_s=gflow_tp,
            status_counts=status_counts,
            all_success=bool(all(gflow.Status(int(c)).success for c in sol.status)),
            events_per_trajectory=_mean_max(sol.crossings.count),
            accepted_steps_per_trajectory=_mean_max(sol.stats["num_accepted"]),
            rejected_steps_per_trajectory=_mean_max(sol.stats["num_rejected"]),
            iterations_per_trajectory=_mean_max(sol.stats["num_iterations"]),
            event_kinds={
                gflow.Kind(k).name: int(np.sum(sol.crossings.kind == k))
                for k in np.unique(sol.crossings.kind)
                if k >= 0
            },
        ),
        scipy=dict(
            sample=len(scipy_runs),
            n_slid=agreement["n_slid"],
            n_errors=agreement["n_scipy_errors"],
            n_non_sliding=len(smooth),
            time_non_sliding_s=smooth_s,
            time_all_s=all_s,
            throughput_per_s=scipy_tp,
            throughput_note=(
                f"extrapolated from a sample of {len(scipy_runs)} trajectories (cost is linear in their number), "
                f"over the {len(smooth)} non-sliding ones only: scipy_flow stops at a slide, so sliding "
                "trajectories are cheaper for it than the full trajectory gflow integrates"
            ),
            throughput_all_sample_per_s=len(all_ok) / all_s if all_ok else float("nan"),
            extrapolated_batch_s=B / scipy_tp,
            nfev_per_trajectory=_mean_max([res.nfev for res, _ in smooth]) if smooth else None,
        ),
        ratio=ratio,
        agreement={k: v for k, v in agreement.items() if k != "records"},
        target=dict(
            ratio=TARGET_RATIO,
            agreement=TARGET_AGREEMENT,
            ratio_met=bool(ratio >= TARGET_RATIO),
            agreement_met=bool(agrees),
            met=bool(ratio >= TARGET_RATIO and agrees),
        ),
        per_trajectory=agreement["records"],
    )


def _fmt(x, spec=".3g"):
    return "n/a" if x is None else format(x, spec)


def print_table(config, machine, r):
    """A Rich table of the headline numbers, then the machine."""
    from rich.console import Console
    from rich.table import Table

    g, s, a, tgt = r["gflow"], r["scipy"], r["agreement"], r["target"]
    table = Table(
        title=f"gflow engine vs SciPy DOP853 (rtol={config['rtol']:g}, atol={config['atol']:g}, t1={config['t1']:g})"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        ("batch size", f"{config['batch']}"),
        ("gflow first call (compile + run)", f"{g['first_call_s']:.2f} s"),
        (
            "gflow wall time (median of timed calls)",
            f"{g['wall_s']:.3f} s  ({', '.join(f'{t:.3f}' for t in g['timed_calls_s'])})",
        ),
        ("gflow throughput", f"{g['throughput_per_s']:.1f} traj/s"),
        ("gflow statuses", ", ".join(f"{k} {v}" for k, v in g["status_counts"].items())),
        (
            "SciPy throughput (non-sliding, extrapolated)",
            f"{s['throughput_per_s']:.1f} traj/s  ({s['n_non_sliding']} traj in {s['time_non_sliding_s']:.2f} s)",
        ),
        ("SciPy throughput over whole sample", f"{s['throughput_all_sample_per_s']:.1f} traj/s"),
        (
            "ratio gflow / SciPy",
            f"{r['ratio']:.1f}x  (target ≥ {tgt['ratio']:g}x: {'met' if tgt['ratio_met'] else 'NOT met'})",
        ),
        ("SciPy sample / sliding / errors", f"{s['sample']} / {s['n_slid']} / {s['n_errors']}"),
        ("max |Δ final weights| (non-sliding)", f"{_fmt(a['max_weight_diff'])}  over {a['n_compared']} traj"),
        ("max |Δ crossing time| (non-sliding)", _fmt(a["max_crossing_time_diff"])),
        (
            "crossing identity mismatches",
            f"{len(a['crossing_mismatches'])} non-sliding, {len(a['sliding_mismatches'])} sliding",
        ),
        ("max |Δ slide start time| (sliding)", _fmt(a["max_slide_time_diff"])),
        ("agreement to 1e-7", "met" if tgt["agreement_met"] else "NOT met"),
        (
            "gflow events per trajectory (mean / max)",
            f"{g['events_per_trajectory']['mean']:.2f} / {g['events_per_trajectory']['max']:.0f}",
        ),
        (
            "gflow accepted steps per traj (mean / max)",
            f"{g['accepted_steps_per_trajectory']['mean']:.1f} / {g['accepted_steps_per_trajectory']['max']:.0f}",
        ),
        (
            "gflow rejected steps per traj (mean / max)",
            f"{g['rejected_steps_per_trajectory']['mean']:.1f} / {g['rejected_steps_per_trajectory']['max']:.0f}",
        ),
        (
            "gflow loop iterations per traj (mean / max)",
            f"{g['iterations_per_trajectory']['mean']:.1f} / {g['iterations_per_trajectory']['max']:.0f}"
            f"  (max/mean {g['iterations_per_trajectory']['max'] / g['iterations_per_trajectory']['mean']:.1f})",
        ),
        (
            "SciPy f-evaluations per traj (mean / max)",
            f"{s['nfev_per_trajectory']['mean']:.0f} / {s['nfev_per_trajectory']['max']:.0f}"
            if s["nfev_per_trajectory"]
            else "n/a",
        ),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console = Console(width=120)
    console.print(table)
    console.print(s["throughput_note"])
    console.print(describe(machine))
    console.print(
        f"Target (≥ {tgt['ratio']:g}x SciPy, agreement to {tgt['agreement']:g}): {'MET' if tgt['met'] else 'NOT MET'}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1000, help="number of trajectories for gflow (default 1000)")
    parser.add_argument("--scipy-sample", type=int, default=100, help="first N of them run by SciPy (default 100)")
    parser.add_argument("--rtol", type=float, default=1e-10)
    parser.add_argument("--atol", type=float, default=1e-12)
    parser.add_argument("--t1", type=float, default=150.0, help="gradient-flow time (default 150)")
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed of the initialisations (default 0)")
    parser.add_argument("--repeats", type=int, default=3, help="timed gflow calls after the compiling one (default 3)")
    parser.add_argument("--out", default="benchmarks/results/engine.json", help="JSON output path")
    args = parser.parse_args(argv)
    if args.batch < 1 or not 1 <= args.scipy_sample <= args.batch or args.repeats < 1:
        parser.error("need batch >= 1, 1 <= scipy-sample <= batch and repeats >= 1")

    config = dict(
        problem="authors' two-point data (gflow.theory.authors_data), 2-2-2 bias-free ReLU, square loss",
        init="xavier_normal",
        batch=args.batch,
        scipy_sample=args.scipy_sample,
        rtol=args.rtol,
        atol=args.atol,
        t1=args.t1,
        seed=args.seed,
        repeats=args.repeats,
        gflow_solver="dopri8 (simulate_batch default)",
        scipy_solver="DOP853 (gflow.reference.scipy_flow)",
    )
    machine = machine_info()
    params, X, Y = make_problem(args.batch, args.seed)
    sol, first, times = run_gflow(params, X, Y, t1=args.t1, rtol=args.rtol, atol=args.atol, repeats=args.repeats)
    scipy_runs = run_scipy(params, X, Y, sample=args.scipy_sample, t1=args.t1, rtol=args.rtol, atol=args.atol)
    agreement = compare(sol, scipy_runs)
    results = summarise(args, sol, first, times, scipy_runs, agreement)

    print_table(config, machine, results)
    save_record(args.out, "engine", config, machine, results)
    return results


if __name__ == "__main__":
    main()
