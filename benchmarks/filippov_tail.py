"""The Scale problem's tail against the reference: weights at save times, GD as arbiter.

Issue 26, item 3 asks gflow and `gflow.reference.filippov_flow` to agree on the 20-point
Scale problem (`benchmarks.deep_scale`'s problem, depth 10, width 20) to `t = 25`. To
`t = 12.5` they agree event for event (`benchmarks.filippov --shapes scale`,
`results/filippov_scale_12.json`); from `t ≈ 13` on, with the loss below 1e-14, the two
sides record different events. This benchmark measures what the flow itself determines
there, from `--start` to `--t1` at every `--every`:

- the weights of both sides at each save time (`dtheta`), their losses, and how many units
  each holds on its surfaces (gflow: its modes there; the reference: its sliding set);
- the records of each side in each interval (the reference's: of the call that reached
  that save time), and of the whole stretch (`reference_records`: the last call's, one
  trajectory, as each call integrates again from its checkpoint's last event);
- as an arbiter independent of both, full-batch gradient descent (`--gd` step sizes,
  `gflow.reference.gradient_descent`) from gflow's weights at `--start`: its loss, its
  weights against both sides, and how far the units within 1e-8 of their surfaces at
  `--start` move off them (the largest `|p|` in each interval, sampled every
  `--gd-sample`; GD's own zigzag across a surface is of order `η`).

gflow runs once to `--t1` with save times (`--rtol`, `--atol`, `--motion-tol`). The
reference runs as a chain of calls, one per save time, each resuming from `--checkpoint`
(its state at its last event; from `t = 0` if the file does not exist), and the results
are written after every save time: an interrupted run loses only the interval it was in,
and a rerun with the same checkpoint and `--out` continues after the last row written.

Run: `python -m benchmarks.filippov_tail --checkpoint FILE [--start 12.5 --t1 25 --every 0.5]
[--rtol 1e-10 --atol 1e-12 --motion-tol 1e-4] [--gd 1e-5] [--out benchmarks/results/filippov_scale_tail.json]`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np

from ._machine import describe, machine_info, save_record
from .filippov import SCALE, gflow_events

_NEAR = 1e-8  # units this close to their surfaces at --start are watched under GD


def _preacts(params, X):
    from gflow.reference import preactivations

    return np.concatenate([p.ravel() for p in preactivations([np.asarray(W) for W in params], X)])


def _descend(params, X, Y, t0, t1, eta, sample, watched):
    """GD from `params` at time `t0` to `t1` in steps of `eta`: the weights at `t1` and the
    largest `|p|` of the `watched` units at the samples in between, with its unit."""
    from gflow.reference import gradient_descent

    largest, unit = 0.0, None
    n = max(1, int(round((t1 - t0) / sample)))
    for k in range(n):
        steps = int(round(((t1 - t0) * (k + 1) / n - (t1 - t0) * k / n) / eta))
        params = gradient_descent(params, X, Y, lr=eta, steps=steps)
        p = np.abs(_preacts(params, X)[watched])
        if p.size and p.max() > largest:
            largest, unit = float(p.max()), int(watched[np.argmax(p)])
    return params, largest, unit


def _label(labels, k):
    return None if k is None else list(labels[k])


def _records(events, after, until=np.inf):
    """The reference's events in `(after, until]` as `[t, layer, neuron, point, kind, side]`."""
    return [[e.t, e.layer, e.neuron, e.point, e.kind, e.side] for e in events if after < e.t <= until]


def run(args, machine):
    import gflow
    from gflow.events import SLIDING
    from gflow.flow import ravel as _flat
    from gflow.networks import index_table
    from gflow.reference import filippov_flow, loss_value

    from .deep_scale import problem

    params, X, Y = problem(SCALE["depth"], SCALE["width"], SCALE["n"])
    saves = np.round(np.arange(args.start, args.t1 + args.every / 2, args.every), 12)
    t = time.perf_counter()
    kw = dict(t1=float(saves[-1]), rtol=args.rtol, atol=args.atol, saveat=saves, max_sliding=SCALE["gflow_sliding"])
    sol = gflow.simulate(params, X, Y, motion_tol=args.motion_tol, max_steps=200_000, **kw)
    gflow_wall = time.perf_counter() - t
    # With motion_tol, the same run without it beside: its weights and loss at the save times.
    plain = gflow.simulate(params, X, Y, **kw).ys if args.motion_tol else None
    plain = plain and [[np.asarray(W[s]) for W in plain] for s in range(len(saves))]
    labels = list(zip(*(a.tolist() for a in index_table(len(X), tuple(W.shape[0] for W in params[:-1])))))
    ours = gflow_events(sol)
    saved = [[np.asarray(W[s]) for W in sol.ys] for s in range(len(saves))]
    modes = sol.modes_at(saves)
    watched = np.flatnonzero(np.abs(_preacts(saved[0], X)) < _NEAR)
    off = lambda params: float(np.max(np.abs(_preacts(params, X)[watched]), initial=0.0))  # noqa: E731
    etas = [float(e) for e in args.gd.split(",")] if args.gd else []
    head = dict(gflow_status=gflow.Status(int(sol.status)).name, gflow_wall_s=gflow_wall,
                gflow_energy_defect=float(sol.energy_defect), gflow_iterations=int(sol.stats["num_iterations"]),
                gflow_mode_gap=float(np.max(sol.mode_gaps(X))), watched=[list(labels[k]) for k in watched])  # fmt: skip
    out = pathlib.Path(args.out)
    rows = json.loads(out.read_text())["results"]["rows"] if out.exists() else []
    gd = {eta: saved[0] for eta in etas}
    prev = float(saves[0])
    for s, T in enumerate(saves[1:], start=1):
        T = float(T)
        if not any(r["T"] == T for r in rows):
            t = time.perf_counter()
            try:
                ref, failed = filippov_flow(params, X, Y, t1=T, max_sliding=SCALE["reference_sliding"],
                                            checkpoint=args.checkpoint, resume=True), None  # fmt: skip
            except RuntimeError as e:
                ref, failed = e.partial, str(e)
            theirs = _flat(ref.params)
            row = dict(T=T, reference_t=float(ref.t), reference_error=failed, reference_wall_s=time.perf_counter() - t,
                       dtheta=float(np.max(np.abs(theirs - _flat(saved[s])))),
                       loss_gflow=float(loss_value(saved[s], X, Y)), loss_reference=float(ref.loss),
                       sliding_gflow=int(np.sum(np.asarray(modes[s]) == SLIDING)), sliding_reference=len(ref.sliding),
                       records_gflow=[list(e) for e in ours if prev < e[0] <= T],
                       records_reference=_records(ref.events, prev, T), off_surface_gflow=off(saved[s]))  # fmt: skip
            if plain:
                row["plain"] = dict(loss=float(loss_value(plain[s], X, Y)), off_surface=off(plain[s]),
                                    dtheta=float(np.max(np.abs(theirs - _flat(plain[s])))))  # fmt: skip
            for eta in etas:
                gd[eta], largest, unit = _descend(gd[eta], X, Y, prev, T, eta, args.gd_sample, watched)
                row[f"gd_{eta:g}"] = dict(loss=float(loss_value(gd[eta], X, Y)), off_surface=largest, unit=_label(labels, unit),
                                          dtheta_gflow=float(np.max(np.abs(_flat(gd[eta]) - _flat(saved[s])))),
                                          dtheta_reference=float(np.max(np.abs(_flat(gd[eta]) - theirs))))  # fmt: skip
            rows.append(row)
            _print_row(row, etas)
            # The last call's records since --start: one reference trajectory (each call re-integrates from its
            # checkpoint's last event, so an interval without events is integrated again by the next call).
            head["reference_records"] = _records(ref.events, saves[0])
            head["gflow_records"] = [list(e) for e in ours if e[0] > saves[0]]
            save_record(args.out, "filippov_tail", vars(args), machine, dict(head, rows=rows))
            if failed:
                break
        else:  # written by an earlier run: GD only moves on
            gd = {eta: _descend(gd[eta], X, Y, prev, T, eta, args.gd_sample, watched)[0] for eta in etas}
        prev = T
    return head, rows


def _print_row(r, etas):
    gd = "".join(f"  GD {eta:g}: loss {r[f'gd_{eta:g}']['loss']:.3e}, off {r[f'gd_{eta:g}']['off_surface']:.1e}"
                 for eta in etas)  # fmt: skip
    plain = f" (without motion_tol {r['plain']['loss']:.3e}, |Δθ| {r['plain']['dtheta']:.1e})" if "plain" in r else ""
    print(f"t={r['T']:6.2f} |Δθ| {r['dtheta']:.2e}  loss gflow {r['loss_gflow']:.3e}{plain} reference {r['loss_reference']:.3e}"
          f"  on surfaces {r['sliding_gflow']}/{r['sliding_reference']}  records {len(r['records_gflow'])}/"
          f"{len(r['records_reference'])}  off {r['off_surface_gflow']:.1e}{gd}  ({r['reference_wall_s']:.0f} s)",
          flush=True)  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.filippov_tail", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--checkpoint", required=True, metavar="FILE", help="the reference's state (resumed if present)"
    )
    parser.add_argument("--start", type=float, default=12.5)
    parser.add_argument("--t1", type=float, default=25.0)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--rtol", type=float, default=1e-10)
    parser.add_argument("--atol", type=float, default=1e-12)
    parser.add_argument("--motion-tol", type=float, default=None)
    parser.add_argument("--gd", default="1e-5", help="GD step sizes, comma-separated ('' for none)")
    parser.add_argument("--gd-sample", type=float, default=0.01, help="GD's sampling interval of |p|")
    parser.add_argument("--out", default="benchmarks/results/filippov_scale_tail.json")
    args = parser.parse_args(argv)
    import gflow  # noqa: F401  (float64)

    machine = machine_info()
    head, rows = run(args, machine)
    print(f"gflow {head['gflow_status']}, {head['gflow_iterations']} iterations, {head['gflow_wall_s']:.0f} s; "
          f"energy defect {head['gflow_energy_defect']:.1e}, mode gap {head['gflow_mode_gap']:.1e}; "
          f"max |Δθ| {max((r['dtheta'] for r in rows), default=np.nan):.1e} over {len(rows)} save times")  # fmt: skip
    print(describe(machine))


if __name__ == "__main__":
    main()
