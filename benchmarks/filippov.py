"""gflow's deep engine against an independent Filippov flow, where several units slide at once.

Issue 26, item 3: on random depth-3 and depth-4 problems in which at least three units
slide at once, gflow must agree with `gflow.reference.filippov_flow` (event-driven SciPy
DOP853 at rtol 1e-12, atol 1e-14, whose sliding velocity is the min-norm point of the hull
of the one-sided gradients, found by Wolfe's algorithm in NumPy; it shares no code
with the engine) to 1e-6 in the final weights and in the crossing times.

**Problems.** `teacher_problem(seed, widths, n)` (as in `tests/test_reference_deep.py`):
He-scaled weights times 0.6, Gaussian inputs, targets of a random teacher of the same
shape; square loss. `PROBLEMS` lists the seeds, per shape, on which the reference meets at
least three units sliding at once before `t1 = 5`: all such seeds among 0–374 of each shape
(scanned with the reference alone on 2026-12-03), except those on which the reference took
over 25 s (9 of depth 3, 14 of depth 4) or met more than 10 units on their surfaces at once
(17 of depth 4; it raises). 10 problems of depth 3 (widths 3-4-4-1, 5 points) and 23 of
depth 4 (3-5-5-5-1, 6 points).

**What it measures.** For each shape, one `gflow.simulate_batch` call over all its
problems (params, `X`, `Y` stacked on a leading batch axis: one compiled program per
shape) at `--rtol`/`--atol` (default 1e-10/1e-12), timed once with compilation and once
more without; then `filippov_flow` on each problem, each call timed. Per problem and
overall:

- `dtheta`: the largest `|Δθ|` of the final weights;
- events: gflow's `cross`, `slide_start` and `slide_end` records are matched to the
  reference's events by `(layer, neuron, point, kind, side)` (gflow's `direction` is the
  reference's `side`), the `i`-th of a key on one side with the `i`-th on the other;
  a reference `cross −1` left over is matched to gflow's `cut` of that unit (a unit whose
  point lost its last activation below: both say it went inactive); `dt_events` is the
  largest time difference of a matched pair, and the unmatched events of either side are
  listed (gflow's `touch`, `repel` and other `cut` records have no counterpart and are
  left out);
- `first_difference`: the earliest event that is unmatched or whose matched time differs
  by more than `--tol`, with the events of both sides within 1e-3 of it;
- the most units sliding at once (replayed from either side's events), gflow's status,
  `energy_defect` (`Solution.energy_defect`; the reference's too) and the largest mode
  gap at the end (`Solution.mode_gaps(X)`);
- wall times: gflow's batch (with and without compilation) per problem, the reference's
  per problem, and their ratio.

**The scale problem** (`--shapes scale`): `benchmarks.deep_scale`'s problem (depth 10,
width 20, 20 points: 3,600 pre-activations) from `t = 0` to `--scale-t1` (default 0.5),
compared the same way, both sides with `deep_scale`'s limit of 64 units sliding at once.
The reference's field costs `2^k` one-point backward passes per point with `k` units on
their surfaces and a Wolfe solve per field evaluation, and `2|K|` more solves for the
tests at every step: to `t = 0.5` (up to 20 units sliding) 0.5.4's took 583–2,622 s on
the 2-core CPU (by what ran beside it) and 0.5.5's 125 s; to `t = 12.5` (up to 31) about
38 minutes (use `--checkpoint` for such runs). Its differing records are not checked for
shared surfaces (`shared_surface` reruns the reference from `t = 0` for each). Beyond
`t ≈ 13` (loss below 1e-14) records stop being comparable: `benchmarks.filippov_tail`
compares that stretch by the weights at save times.

`--tight RTOL,ATOL` repeats gflow at tighter tolerances (a second compile per shape) and
reports its `dtheta` and `dt_events` too, to tell a tolerance-limited difference from a
different trajectory.

A reference run that stops on its limits is compared up to its stop (its `partial`
result): gflow's records more than `--tol` before it against the reference's events, not
the weights. With `--checkpoint DIR` each reference run keeps its state in
`DIR/{shape}-{seed}.json` after every event (`filippov_flow`'s `checkpoint`), and a
rerun with the same `DIR` resumes it from there, to the same result; its wall time is
then that of the resumed part.

Run: `python -m benchmarks.filippov [--shapes depth3,depth4 | scale [--scale-t1 0.5]] [--rtol 1e-10 --atol 1e-12]
[--tight 1e-12,1e-14] [--max-problems N] [--checkpoint DIR] [--out benchmarks/results/filippov.json]`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ._machine import describe, machine_info, save_record

# shape name -> (widths, n, t1, seeds): seeds on which filippov_flow meets >= 3 units
# sliding at once before t1.
PROBLEMS = {
    "depth3": ((3, 4, 4, 1), 5, 5.0, (9, 30, 53, 127, 149, 198, 290, 296, 304, 333)),
    "depth4": (
        (3, 5, 5, 5, 1),
        6,
        5.0,
        (9, 13, 16, 17, 44, 50, 86, 87, 101, 118, 134, 149, 156, 163, 210, 219, 234, 304, 307, 312, 330, 352, 370),
    ),
}
MAX_SLIDING = 10  # both sides: the reference's default
# The "scale" shape: benchmarks.deep_scale's problem (depth 10, width 20, 20 points) from
# t = 0 to --scale-t1, both sides with deep_scale's limit of 64 units sliding at once.
SCALE = dict(depth=10, width=20, n=20, t1=0.5, reference_sliding=64, gflow_sliding=64)
KEYED = ("cross", "slide_start", "slide_end")


def teacher_problem(seed, widths, n, scale=0.6):
    """Random He-scaled weights (times `scale`), Gaussian inputs, targets from a random teacher."""
    rng = np.random.default_rng(seed)
    pairs = list(zip(widths[:-1], widths[1:], strict=True))
    params = [rng.normal(size=(b, a)) * scale * np.sqrt(2 / a) for a, b in pairs]
    X = rng.normal(size=(n, widths[0]))
    teacher = [rng.normal(size=(b, a)) / np.sqrt(a) for a, b in pairs]
    h = X
    for W in teacher[:-1]:
        h = np.maximum(h @ W.T, 0.0)
    return params, X, h @ teacher[-1].T


def most_at_once(events):
    """The largest number of units sliding together, replayed from `(t, layer, neuron,
    point, kind, side)` tuples in time order."""
    sliding, most = set(), 0
    for _, layer, neuron, point, kind, _ in events:
        if kind == "slide_start":
            sliding.add((layer, neuron, point))
        elif kind == "slide_end":
            sliding.discard((layer, neuron, point))
        most = max(most, len(sliding))
    return most


def match_events(ours, ref, cuts=()):
    """Pair the `(t, layer, neuron, point, kind, side)` tuples of both sides by key in time
    order. A reference `cross −1` left unmatched is paired with gflow's `cut` of that unit
    (in `cuts`) nearest in time: both say the unit went inactive there (a cut unit sits at
    `p = 0` exactly because its point lost every activation in the layer below; gflow
    records it as `cut`, the reference as a crossing). Returns `(pairs, unmatched_ours,
    unmatched_ref)`, `pairs` as `(ours, ref)`."""
    pairs, left, right = [], [], []
    keys = {e[1:] for e in ours} | {e[1:] for e in ref}
    for key in keys:
        a = [e for e in ours if e[1:] == key]
        b = [e for e in ref if e[1:] == key]
        pairs += list(zip(a, b))
        left += a[len(b) :]
        right += b[len(a) :]
    cuts = list(cuts)
    for e in [e for e in right if e[4:] == ("cross", -1)]:
        same = [c for c in cuts if c[1:4] == e[1:4]]
        if same:
            c = min(same, key=lambda c: abs(c[0] - e[0]))
            cuts.remove(c)
            right.remove(e)
            pairs.append((c, e))
    by_t = lambda e: e[0]
    return sorted(pairs, key=lambda p: p[1][0]), sorted(left, key=by_t), sorted(right, key=by_t)


def compare(ours, ref, tol, cuts=()):
    """Matched time difference, unmatched events and the first difference of two event lists
    (`cuts`: gflow's `cut` records, :func:`match_events`)."""
    pairs, left, right = match_events(ours, ref, cuts)
    dt = max((abs(a[0] - b[0]) for a, b in pairs), default=0.0)
    suspects = [(b[0], "time", a, b) for a, b in pairs if abs(a[0] - b[0]) > tol]
    suspects += [(e[0], "gflow only", e, None) for e in left] + [(e[0], "reference only", None, e) for e in right]
    first = None
    if suspects:
        t, what, a, b = min(suspects, key=lambda s: s[0])
        near = lambda evs: [list(e) for e in evs if abs(e[0] - t) <= 1e-3]
        first = dict(t=t, what=what, gflow=a and list(a), reference=b and list(b), gflow_near=near(ours),
                     reference_near=near(ref))  # fmt: skip
    return dict(matched=len(pairs), dt_events=dt, unmatched_gflow=[list(e) for e in left],
                unmatched_reference=[list(e) for e in right], first_difference=first,
                differences=[[a and list(a), b and list(b)] for _, _, a, b in sorted(suspects, key=lambda s: s[0])])  # fmt: skip


def only_shared_surfaces(params, X, Y, differences, max_sliding=MAX_SLIDING):
    """Whether every differing record (`compare`'s `differences`, pairs of gflow's and the
    reference's events, either `None`) is of a unit on a surface it shares with a twin
    (`shared_surface`) at the time of each side's record: then only the records differ,
    which twin carries the sliding control or is called crossed, not the flow. `None`
    if nothing differs."""
    if not differences:
        return None
    checked = {}
    for pair in differences:
        for e in pair:
            if e is not None:
                key = (round(e[0], 12), e[1], e[3])
                if key not in checked:
                    checked[key] = bool(
                        shared_surface(params, X, Y, dict(t=e[0], reference=e, gflow=None), max_sliding)
                    )
    return all(checked.values())


def shared_surface(params, X, Y, difference, max_sliding=MAX_SLIDING, tol=1e-12):
    """The other points at which the unit of a first difference shares its surface when it
    happens: its layer's inputs there are positive multiples of those at its point (1 − cos
    ≤ `tol`, in the reference's state at that time), so the neuron's pre-activations at
    those points are multiples of its own and vanish together. Which of such units carries
    a sliding control, or is called on which side, does not change the flow: their events
    are labels, not crossings. `[]` if none."""
    from gflow.reference import _forward, filippov_flow

    event = difference["reference"] or difference["gflow"]
    layer, point = event[1], event[3]
    state = filippov_flow(params, X, Y, t1=difference["t"], max_sliding=max_sliding).params
    h = _forward([np.asarray(W) for W in state], np.asarray(X, dtype=np.float64))[1][layer]
    norms = np.linalg.norm(h, axis=1)
    if norms[point] == 0:
        return []
    cos = h @ h[point] / np.maximum(norms * norms[point], np.finfo(np.float64).tiny)
    return [int(k) for k in np.flatnonzero((1.0 - cos <= tol) & (norms > 0)) if k != point]


def gflow_events(sol_b, kinds=KEYED):
    """gflow's records of one member of the given kinds, as tuples."""
    rows = sol_b.crossings.rows()
    return [
        (r["t"], r["layer"], r["neuron"], r["point"], r["kind"], r["direction"]) for r in rows if r["kind"] in kinds
    ]


def run_gflow(problems, t1, rtol, atol, max_sliding=MAX_SLIDING):
    """One simulate_batch over the problems, timed with and without compilation."""
    import gflow

    stack = lambda arrays: np.stack(arrays)
    params = [stack([p[0][i] for p in problems]) for i in range(len(problems[0][0]))]
    X, Y = stack([p[1] for p in problems]), stack([p[2] for p in problems])
    kw = dict(t1=t1, rtol=rtol, atol=atol, max_sliding=max_sliding)
    t = time.perf_counter()
    gflow.simulate_batch(params, X, Y, **kw)
    first = time.perf_counter() - t
    t = time.perf_counter()
    sol = gflow.simulate_batch(params, X, Y, **kw)
    return sol, first, time.perf_counter() - t


class _NoReference:
    """Stands in for a reference run that raised before its first event: no events, and
    weights that compare as NaN."""

    def __init__(self, params):
        self.events, self.params = [], [np.full(np.shape(W), np.nan) for W in params]
        self.energy_defect = self.drift = np.nan
        self.nfev, self.t = 0, 0.0


def run_shape(name, seeds, rtol, atol, tight, tol, scale_t1=SCALE["t1"], checkpoint=None):
    """Both sides on the problems of one shape (`"scale"`: the one problem of `SCALE`)."""
    if name == "scale":
        from .deep_scale import problem

        problems, n, t1, seeds = [problem(SCALE["depth"], SCALE["width"], SCALE["n"])], SCALE["n"], scale_t1, ["scale"]
        widths = (problems[0][0][0].shape[1],) + tuple(W.shape[0] for W in problems[0][0])
        sliding = SCALE["reference_sliding"], SCALE["gflow_sliding"]
    else:
        widths, n, t1, _ = PROBLEMS[name]
        problems, sliding = [teacher_problem(seed, widths, n) for seed in seeds], (MAX_SLIDING, MAX_SLIDING)
    shared = name != "scale"  # shared_surface reruns the reference from t = 0 per record: as long as the run
    return run_problems(name, seeds, problems, widths, n, t1, rtol, atol, tight, tol, sliding, checkpoint, shared)


def run_problems(name, seeds, problems, widths, n, t1, rtol, atol, tight, tol, sliding, checkpoint=None, shared=True):
    """gflow (one batch) and the reference (each problem) on `problems`, compared;
    `sliding`: the most units at once for the reference and for gflow; `checkpoint`: a
    folder where each reference run keeps its state (`{name}-{seed}.json`) and from which
    it resumes; `shared`: whether differing records are checked for shared surfaces
    (`shared_surface`, one rerun of the reference per record; `None` where not)."""
    import gflow
    from gflow.reference import filippov_flow

    sol, gflow_first, gflow_wall = run_gflow(problems, t1, rtol, atol, sliding[1])
    sol_tight = run_gflow(problems, t1, *tight, sliding[1])[0] if tight else None
    rows = []
    for b, (seed, (params, X, Y)) in enumerate(zip(seeds, problems, strict=True)):
        t = time.perf_counter()
        try:
            kept = dict(checkpoint=f"{checkpoint}/{name}-{seed}.json", resume=True) if checkpoint else {}
            ref, failed = filippov_flow(params, X, Y, t1=t1, max_sliding=sliding[0], **kept), None
        except RuntimeError as e:  # the reference's own limits (events, units at once)
            ref, failed = getattr(e, "partial", None) or _NoReference(params), str(e)
        ref_wall = time.perf_counter() - t
        theirs = [(e.t, e.layer, e.neuron, e.point, e.kind, e.side) for e in ref.events]
        sb = sol[b]
        # A reference that stopped short: the events before its stop are compared (gflow's
        # more than `tol` before it: the event the reference stopped at is not), its
        # weights (of that time) are not.
        stop = ref.t - tol if failed else np.inf
        before = lambda events, stop=stop: [e for e in events if e[0] < stop]  # noqa: E731
        ours = before(gflow_events(sb))
        ref_params = [np.full(np.shape(W), np.nan) for W in params] if failed else ref.params
        row = dict(
            shape=name, widths=widths, n=n, seed=seed, t1=t1, status=gflow.Status(int(sol.status[b])).name,
            reference_error=failed, reference_t=float(ref.t),
            t=float(sb.t), dtheta=max(float(np.max(np.abs(np.asarray(W) - R))) for W, R in zip(sb.params, ref_params)),
            **compare(ours, theirs, tol, before(gflow_events(sb, ("cut",)))), events_gflow=len(ours), events_reference=len(theirs),
            kinds_gflow={k: [r["kind"] for r in sb.crossings.rows()].count(k) for k in
                         ("cross", "slide_start", "slide_end", "touch", "repel", "cut")},
            most_sliding_reference=most_at_once(theirs), most_sliding_gflow=most_at_once(ours),
            energy_defect=float(sb.energy_defect), energy_defect_reference=float(ref.energy_defect),
            mode_gap=float(np.max(sb.mode_gaps(X))), drift_reference=float(ref.drift),
            iterations=int(sb.stats["num_iterations"]), reference_nfev=int(ref.nfev),
            wall_reference_s=ref_wall, events=dict(gflow=[list(e) for e in ours], reference=[list(e) for e in theirs]),
        )  # fmt: skip
        if row["first_difference"] and not failed and shared:
            row["first_difference"]["shared_with"] = shared_surface(params, X, Y, row["first_difference"], sliding[0])
        row["labels_only"] = (
            only_shared_surfaces(params, X, Y, row["differences"], sliding[0]) if shared and not failed else None
        )
        if sol_tight is not None:
            st = sol_tight[b]
            row["dtheta_tight"] = max(float(np.max(np.abs(np.asarray(W) - R))) for W, R in zip(st.params, ref_params))
            tight_events = compare(before(gflow_events(st)), theirs, tol, before(gflow_events(st, ("cut",))))
            row["dt_events_tight"] = tight_events["dt_events"]
            row["agree_tight"] = bool(
                row["dtheta_tight"] <= tol and tight_events["dt_events"] <= tol and not tight_events["first_difference"]
            )
            row["first_difference_tight"] = tight_events["first_difference"]
            if tight_events["first_difference"] and not failed and shared:
                row["first_difference_tight"]["shared_with"] = shared_surface(
                    params, X, Y, tight_events["first_difference"], sliding[0]
                )
        rows.append(row)
    B = len(seeds)
    batch = dict(shape=name, widths=widths, n=n, t1=t1, B=B, gflow_first_call_s=gflow_first, gflow_s=gflow_wall,
                 gflow_per_problem_s=gflow_wall / B, reference_per_problem_s=sum(r["wall_reference_s"] for r in rows) / B)  # fmt: skip
    batch["ratio"] = batch["reference_per_problem_s"] / batch["gflow_per_problem_s"]
    return rows, batch


def _fmt_event(e):
    return "—" if e is None else f"t={e[0]:.9g} {tuple(e[1:4])} {e[4]} {e[5]:+d}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.filippov", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shapes",
        default=",".join(PROBLEMS),
        help=f"comma-separated, of {list(PROBLEMS) + ['scale']} (default: all but scale)",
    )
    parser.add_argument("--scale-t1", type=float, default=SCALE["t1"], help="the scale problem's t1 (0.5)")
    parser.add_argument("--rtol", type=float, default=1e-10)
    parser.add_argument("--atol", type=float, default=1e-12)
    parser.add_argument("--tight", default="", help="RTOL,ATOL: gflow once more at these tolerances (default: not)")
    parser.add_argument("--tol", type=float, default=1e-6, help="the target on weights and event times (1e-6)")
    parser.add_argument("--max-problems", type=int, default=0, help="the first N seeds of each shape (0: all)")
    parser.add_argument("--checkpoint", default="", metavar="DIR",
                        help="keep each reference run's state in DIR and resume from it (default: not)")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/filippov.json")
    args = parser.parse_args(argv)
    import gflow  # noqa: F401  (float64)

    tight = tuple(float(v) for v in args.tight.split(",")) if args.tight else None
    machine = machine_info()
    rows, batches = [], []
    for name in args.shapes.split(","):
        seeds = PROBLEMS[name][3][: args.max_problems or None] if name != "scale" else None
        r, b = run_shape(name, seeds, args.rtol, args.atol, tight, args.tol, args.scale_t1, args.checkpoint or None)
        rows += r
        batches.append(b)
    print(f"gflow rtol {args.rtol:g}, atol {args.atol:g}" + (f" (and {tight[0]:g}, {tight[1]:g})" if tight else "")
          + "; reference filippov_flow rtol 1e-12, atol 1e-14; target |Δθ|, |Δt| ≤ "
          f"{args.tol:g}")  # fmt: skip
    print(f"{'shape':7} {'seed':>5} {'status':11} {'|Δθ|':>8} {'|Δt| ev':>8} {'match':>5} {'unm g/r':>7} "
          f"{'K max r/g':>9} {'E defect':>8} {'mode gap':>8}" + (f" {'|Δθ| tight':>10}" if tight else ""))  # fmt: skip
    for r in rows:
        ok = r["dtheta"] <= args.tol and r["dt_events"] <= args.tol and not r["first_difference"]
        print(f"{r['shape']:7} {r['seed']!s:>5} {r['status']:11} {r['dtheta']:8.1e} {r['dt_events']:8.1e} "
              f"{r['matched']:5d} {len(r['unmatched_gflow']):3d}/{len(r['unmatched_reference']):<3d} "
              f"{r['most_sliding_reference']:4d}/{r['most_sliding_gflow']:<4d} {r['energy_defect']:8.1e} "
              f"{r['mode_gap']:8.1e}" + (f" {r['dtheta_tight']:10.1e}" if tight else "") + ("" if ok else "  ✗"))  # fmt: skip
    for r in rows:
        f = r["first_difference"]
        if r["reference_error"]:
            print(f"{r['shape']} seed {r['seed']}: the reference stopped at t = {r['reference_t']:.9g}: "
                  f"{r['reference_error']} (the events before it are compared, the weights are not)")  # fmt: skip
        if f:
            print(f"{r['shape']} seed {r['seed']}: first difference at t = {f['t']:.9g} ({f['what']}): "
                  f"gflow {_fmt_event(f['gflow'])}, reference {_fmt_event(f['reference'])}")  # fmt: skip
            print(f"    gflow near: {'; '.join(_fmt_event(e) for e in f['gflow_near']) or '—'}")
            print(f"    reference near: {'; '.join(_fmt_event(e) for e in f['reference_near']) or '—'}")
            if f.get("shared_with"):
                print(f"    on a surface shared with the same neuron's units at points {f['shared_with']} "
                      "(inputs positive multiples of each other): a label, not a crossing")  # fmt: skip
        f = r.get("first_difference_tight")
        if f and not r["reference_error"]:
            shared = f" (surface shared with points {f['shared_with']})" if f.get("shared_with") else ""
            print(f"{r['shape']} seed {r['seed']} at the tight tolerances: first difference at t = {f['t']:.9g} ({f['what']}): "
                  f"gflow {_fmt_event(f['gflow'])}, reference {_fmt_event(f['reference'])}{shared}")  # fmt: skip
    for b in batches:
        print(f"{b['shape']} ({b['B']} problems, one batch): gflow {b['gflow_first_call_s']:.1f} s with compilation, "
              f"{b['gflow_s']:.2f} s without ({b['gflow_per_problem_s']:.3f} s per problem); reference "
              f"{b['reference_per_problem_s']:.2f} s per problem; ratio {b['ratio']:.1f}×")  # fmt: skip
    agree = [r for r in rows if r["dtheta"] <= args.tol and r["dt_events"] <= args.tol and not r["first_difference"]]
    compared = [r for r in rows if not r["reference_error"]]
    summary = dict(
        problems=len(rows), agree=len(agree), disagree=[(r["shape"], r["seed"]) for r in rows if r not in agree],
        reference_failed=[(r["shape"], r["seed"]) for r in rows if r["reference_error"]],
        dtheta_max=max((r["dtheta"] for r in compared), default=np.nan),
        dt_events_max=max((r["dt_events"] for r in compared), default=np.nan),
        dtheta_max_agreeing=max((r["dtheta"] for r in agree), default=None),
        dt_events_max_agreeing=max((r["dt_events"] for r in agree), default=None),
        energy_defect_max=max(r["energy_defect"] for r in rows), mode_gap_max=max(r["mode_gap"] for r in rows),
        most_sliding_min=min((r["most_sliding_reference"] for r in compared), default=0),
        weights_agree=sum(r["dtheta"] <= args.tol for r in compared),
        labels_only=[(r["shape"], r["seed"]) for r in rows if r not in agree and r["labels_only"] and r["dtheta"] <= args.tol],
    )  # fmt: skip
    if tight:
        summary["agree_tight"] = sum(r["agree_tight"] for r in rows)
        summary["disagree_tight"] = [(r["shape"], r["seed"]) for r in rows if not r["agree_tight"]]
    print(f"overall: {summary['agree']} of {summary['problems']} problems agree to {args.tol:g} "
          f"(max |Δθ| {summary['dtheta_max']:.1e}, max |Δt| {summary['dt_events_max']:.1e}; over the agreeing ones "
          f"{summary['dtheta_max_agreeing'] or 0:.1e}, {summary['dt_events_max_agreeing'] or 0:.1e}); energy defect "
          f"≤ {summary['energy_defect_max']:.1e}; mode gap ≤ {summary['mode_gap_max']:.1e}; disagree: "
          f"{summary['disagree']}; the reference raised on {summary['reference_failed']}")  # fmt: skip
    print(f"weights agree to {args.tol:g} on {summary['weights_agree']} of {len(compared)}; of the problems that "
          f"disagree, every differing record is of a unit on a surface shared with a twin (a label) on "
          f"{summary['labels_only']}")  # fmt: skip
    if tight:
        print(f"at rtol {tight[0]:g}, atol {tight[1]:g}: {summary['agree_tight']} of {summary['problems']} agree; "
              f"disagree: {summary['disagree_tight']}")  # fmt: skip
    print(describe(machine))
    save_record(args.out, "filippov", vars(args), machine, dict(summary=summary, batches=batches, problems=rows))


if __name__ == "__main__":
    main()
