"""One large deep network, every kink handled: issue 4's scale (depth, width, points).

The problem of the README's "Scale" table: widths ``(5, m, …, m, 1)`` with ``depth − 1``
hidden layers of width ``m``, Xavier-normal weights (``jax.random.PRNGKey(2)``), ``n``
inputs ``jax.random.normal(PRNGKey(0), (n, 5))`` on the unit sphere, targets
``|N(0, 1)| + 0.5`` (``PRNGKey(1)``), square loss, ``gflow.simulate`` with
``events="stop"`` to ``t1`` (``--rtol``, ``--atol``: gflow's defaults 1e-8 and 1e-10;
at most ``--max-steps`` iterations, default 20,000).

The run goes from save time to save time (41 of them): one ``gflow.simulate`` call per
interval, continued from the last one's weights and modes with the same compiled program,
and a progress line after each (time, status, loss, iterations, units sliding, energy
identity, mode gap, wall time). A call continued with modes puts its given sliding units on
their surfaces at ``t = 0`` where they are more than half a round-off band off (a jump whose
loss change, ``stats["surface_jump"]``, is summed and reported beside the energy identity). With ``--state PATH`` the run so far is written there
(atomically) after every interval (:func:`save_state`: the weights and modes at every save
time, the rows, the last end point), and ``--resume`` continues it after an interruption.

Reported: status, time reached, iterations (accepted / rejected), events by kind, the
loss at the start and the end (gflow's, and NumPy's from ``gflow.reference`` for the same
end point), the SPEC §3 drift, the units sliding at the end, the largest gap between a
unit's mode and its pre-activation (``Solution.mode_gaps``: round-off for an exact run)
at the end and at the save times, the energy identity's relative defect
``|L(0) − L(t) − ∫‖θ̇‖²| / (L(0) − L(t))`` at the end and at the save times, the largest
rise of the loss between save times, and the wall time of the calls (compilation
included: a run this size compiles once). One run, no ratio: this is a capacity
measurement, not a comparison.

With ``--gd 1e-3,5e-4`` it also runs full-batch gradient descent
(``gflow.reference.gradient_descent``) from the same start at each step size to every save
time and prints both losses beside gflow's: GD follows the flow to first order in ``η``, so
``|L_GD(η) − L_GF|`` halves with ``η`` wherever the flow is computed right (issue 26, item 4).

With ``--per-k M`` it also measures what an iteration costs against ``K``, the number of
units sliding at once (issue 26, item 5): from the state at each save time reached, with
its modes, it runs ``M`` more iterations with the same
compiled program (one untimed call first) and prints ``K`` there, the most units sliding in
any event of those iterations, the slot count of the sliding solves that ``K`` selects
(:func:`gflow.events.slot_sizes`) and the wall time per iteration.

Run: ``python -m benchmarks.deep_scale [--depth 10 --width 20 --points 20 --t1 100
--max-sliding 64 --max-steps 20000 --rtol 1e-8 --atol 1e-10] [--gd 1e-3,5e-4] [--per-k 40]
[--state PATH [--resume]] [--out benchmarks/results/deep_scale.json]``. The
README's rows took 5–27 minutes each on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from ._machine import describe, machine_info, save_record


def problem(depth, width, n):
    """Start, inputs and targets of the scale problem (module docstring)."""
    import jax

    import gflow

    X = np.array(jax.random.normal(jax.random.PRNGKey(0), (n, 5)))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = np.abs(np.asarray(jax.random.normal(jax.random.PRNGKey(1), (n, 1)))) + 0.5
    widths = (5,) + (width,) * (depth - 1) + (1,)
    params = [np.asarray(W) for W in gflow.init_params(jax.random.PRNGKey(2), widths)]
    return params, X, Y


def descent_losses(params, X, Y, ts, lr):
    """Full-batch GD's loss at the times ``ts`` (from 0), ``Δt/lr`` steps between them
    (``lr`` must divide the intervals: GD at ``η`` is compared at ``t = kη``)."""
    from gflow.reference import gradient_descent, loss_value

    losses, p, t = [], [np.asarray(W) for W in params], 0.0
    for tau in ts:
        steps = (tau - t) / lr
        if abs(steps - round(steps)) > 1e-9 * max(steps, 1.0):
            raise ValueError(f"--gd: step size {lr:g} does not divide the interval {tau - t:g} between save times")
        p = gradient_descent(p, X, Y, lr=lr, steps=int(round(steps)))
        t = tau
        losses.append(loss_value(p, X, Y, "square"))
    return losses


def save_state(path, config, states, rows, sol, X, Y):
    """The run so far as ``.npz``, written atomically after every save interval, to look at
    or resume (``--resume``): ``config`` (JSON), the weights and modes at each save time
    reached (``saved_W0`` … with a leading save-time axis, ``saved_modes``), the per-interval
    ``rows`` (JSON), and the last interval's end point: ``W0`` …, ``X``, ``Y``, ``t``,
    ``status``, the final modes and those just before its end (``modes_before``: a member
    stopped at an unresolved kink ends with the kink partly applied)."""
    import json

    from gflow._io import atomic_write

    before = sol.modes_at(max(sol.t * (1.0 - 1e-12), 0.0))
    t = rows[-1]["t"] if rows else 0.0
    saved = {f"saved_W{i}": np.stack([s[0][i] for s in states]) for i in range(len(sol.params))}
    arrays = dict({f"W{i}": np.asarray(W) for i, W in enumerate(sol.params)}, **saved, X=X, Y=Y, t=t,
                  status=sol.status.name, modes=np.asarray(sol.final_modes), modes_before=np.asarray(before),
                  saved_modes=np.stack([s[1] for s in states]), config=json.dumps(config), rows=json.dumps(rows))  # fmt: skip
    atomic_write(path, lambda f: np.savez(f, **arrays))


def load_state(path, config):
    """``(states, rows)`` of a run saved by :func:`save_state` with the same ``config``."""
    import json

    z = np.load(path)
    if json.loads(str(z["config"])) != config:
        raise ValueError(f"--resume: {path} holds a run of {str(z['config'])}, not of {json.dumps(config)}")
    layers = sum(1 for k in z.files if k.startswith("saved_W"))
    saved = [z[f"saved_W{i}"] for i in range(layers)]
    states = [([W[k] for W in saved], z["saved_modes"][k]) for k in range(len(z["saved_modes"]))]
    return states, json.loads(str(z["rows"]))


def iteration_cost(states, X, Y, ts, max_sliding, iterations, tolerances):
    """Wall time per iteration from the state at each save time reached, against the units
    sliding there (module docstring): one row per save time."""
    import gflow
    from gflow import events

    def from_save(i, steps):
        params, modes = states[i]
        # The same options and number of save times as the run: its compiled program.
        t = time.perf_counter()
        again = gflow.simulate(params, X, Y, t1=ts[-1], throw=False, max_steps=steps, max_sliding=max_sliding,
                               saveat=ts[:2] - ts[0], modes=modes, **tolerances)  # fmt: skip
        return again, modes, time.perf_counter() - t

    from_save(0, 1)  # untimed: loads the program (compiled by the run)
    sizes = events.slot_sizes(max_sliding)
    rows = []
    for i in range(len(states)):
        again, modes, wall = from_save(i, iterations)
        K = int(np.sum(modes == events.SLIDING))
        counts = [K] + [int(np.sum(np.asarray(again.modes_at(t)) == events.SLIDING)) for t in again.crossings.t]
        done = int(again.stats["num_iterations"])
        rows.append(dict(
            t=float(ts[i]), K=K, K_max=max(counts), slots=min(s for s in sizes if s >= K) if K else 0,
            iterations=done, wall_s=wall, s_per_iteration=wall / max(done, 1), status=again.status.name,
        ))  # fmt: skip
    return rows


def interval(sol, t0, loss0, energy0, jump0, X, wall):
    """One save interval's row: where it ended, what it did, and the checks there (the
    energy integral and the moves' loss change, ``surface_jump``, summed from ``t = 0``)."""
    from gflow import events

    energy, jump = energy0 + float(sol.energy), jump0 + float(sol.stats["surface_jump"])
    drop = loss0 - float(sol.loss)
    modes = [sol.initial_modes, sol.final_modes] + [sol.modes_at(t) for t in sol.crossings.t]
    sliding = [int(np.sum(np.asarray(m) == events.SLIDING)) for m in modes]
    kinds = dict(Counter(r["kind"] for r in sol.crossings.rows()))
    return dict(
        t=t0 + float(sol.t), status=sol.status.name, stats={k: int(v) for k, v in sol.stats.items() if k.startswith("num_")},
        events=kinds, tolerance_factor=float(sol.stats["tolerance_factor"]),
        loss=float(sol.loss), energy=energy, energy_defect=abs(drop - energy) / max(abs(drop), 1e-300), surface_jump=jump,
        gap=float(np.max(sol.mode_gaps(X))), gap_start=float(np.max(sol.mode_gaps(X, 0.0))),
        K=int(np.sum(np.asarray(sol.final_modes) == events.SLIDING)), K_max=max(sliding), wall_s=wall,
    )  # fmt: skip


def run(depth, width, n, t1, max_sliding, max_steps=20_000, gd=(), state=None, per_k=0, rtol=1e-8, atol=1e-10,
        resume=False, motion_tol=None):  # fmt: skip
    """The flow from save time to save time (one ``gflow.simulate`` call each, continued
    from the last one's weights and modes, one compiled program), a progress line after
    each, the run so far saved to ``state`` if given; then the summary."""
    import gflow
    from gflow.reference import balance_drift, loss_value

    params, X, Y = problem(depth, width, n)
    ts = np.linspace(0.0, t1, 41)
    config = dict(depth=depth, width=width, n=n, t1=t1, max_sliding=max_sliding, max_steps=max_steps, rtol=rtol,
                  atol=atol)  # fmt: skip
    if motion_tol is not None:
        config["motion_tol"] = motion_tol
    tolerances = dict(rtol=rtol, atol=atol, motion_tol=motion_tol)
    loss0 = loss_value(params, X, Y, "square")
    states, rows = load_state(state, config) if resume else ([([np.asarray(W) for W in params], None)], [])
    if resume:
        print(f"resumed at t = {ts[len(states) - 1]:g} ({len(rows)} intervals done)", flush=True)
    sol = None
    while len(states) < len(ts) and not (rows and rows[-1]["status"] != "REACHED_T1"):
        i = len(states) - 1
        current, modes = states[-1]
        used = sum(r["stats"]["num_iterations"] for r in rows)
        if used >= max_steps:
            break
        t = time.perf_counter()
        span = ts[i + 1] - ts[i]
        sol = gflow.simulate(current, X, Y, t1=span, throw=False, max_steps=max_steps - used, max_sliding=max_sliding,
                             saveat=np.array([0.0, span]), modes=modes, **tolerances)  # fmt: skip
        wall = time.perf_counter() - t
        if i == 0:  # the modes the run starts with (decided at t = 0), for --per-k
            states[0] = (states[0][0], np.asarray(sol.initial_modes))
        before = (rows[-1]["energy"], rows[-1].get("surface_jump", 0.0)) if rows else (0.0, 0.0)
        rows.append(interval(sol, ts[i], loss0, *before, X, wall))
        if sol.status == gflow.Status.REACHED_T1:
            states.append(([np.asarray(W) for W in sol.params], np.asarray(sol.final_modes)))
        r = rows[-1]
        print(f"t {r['t']:7.3f}  {r['status']}  loss {r['loss']:.3e}  iterations {r['stats']['num_iterations']:5d}  "
              f"K {r['K']:3d} (max {r['K_max']:3d})  energy defect {r['energy_defect']:.1e}  gap {r['gap']:.1e}  "
              f"tolerance factor {r['tolerance_factor']:.1e}  {wall:6.1f} s", flush=True)  # fmt: skip
        if state:
            save_state(state, config, states, rows, sol, X, Y)
    last, reached = rows[-1], len(states)
    if last["status"] == "REACHED_T1":
        end = states[-1][0]
    elif sol is not None:
        end = [np.asarray(W) for W in sol.params]
    else:  # resumed after the run had stopped: the stop's end point
        z = np.load(state)
        end = [z[f"W{i}"] for i in range(depth)]
    # Out of iterations exactly at a save time: the run did not reach t1.
    status = "MAX_STEPS" if last["status"] == "REACHED_T1" and reached < len(ts) else last["status"]
    saved_loss = np.array([loss0] + [r["loss"] for r in rows[: reached - 1]])
    saved_defect = [r["energy_defect"] for r in rows[: reached - 1]]
    saved_gaps = [rows[0]["gap_start"]] + [r["gap"] for r in rows[: reached - 1]]
    stats = {k: sum(r["stats"][k] for r in rows) for k in rows[0]["stats"]}
    kinds = dict(sum((Counter(r["events"]) for r in rows), Counter()))
    return dict(
        depth=depth, width=width, n=n, preactivations=n * width * (depth - 1), t1=t1, max_sliding=max_sliding,
        rtol=rtol, atol=atol, motion_tol=motion_tol, max_steps=max_steps,
        status=status, t=last["t"], stats=stats, events=kinds, loss0=float(loss0), loss=last["loss"],
        loss_numpy=float(loss_value(end, X, Y, "square")), drift=balance_drift(params, end),
        sliding_at_end=last["K"], gap_all=last["gap"], gap_saved_max=max(saved_gaps),
        energy_defect=last["energy_defect"], energy_defect_saved_max=float(max(saved_defect, default=0.0)),
        surface_jump=last.get("surface_jump", 0.0),
        loss_rise_max=float(np.max(np.diff(saved_loss), initial=0.0)),
        saved_t=ts[:reached].tolist(), saved_loss=saved_loss.tolist(), saved_gaps=saved_gaps,
        wall_s=sum(r["wall_s"] for r in rows), intervals=rows,
        gd={str(lr): descent_losses(params, X, Y, ts[:reached], lr) for lr in gd},
        per_k=iteration_cost(states, X, Y, ts, max_sliding, per_k, tolerances) if per_k else [],
    )  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.deep_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=10, help="layers (default 10: 9 hidden)")
    parser.add_argument("--width", type=int, default=20, help="hidden width (default 20)")
    parser.add_argument("--points", type=int, default=20, help="data points (default 20)")
    parser.add_argument("--t1", type=float, default=100.0)
    parser.add_argument("--max-sliding", type=int, default=64)
    parser.add_argument("--rtol", type=float, default=1e-8, help="gflow's rtol (default 1e-8, gflow's)")
    parser.add_argument("--atol", type=float, default=1e-10, help="gflow's atol (default 1e-10, gflow's)")
    parser.add_argument("--motion-tol", type=float, default=None, help="gflow's motion_tol (default: none)")
    parser.add_argument("--max-steps", type=int, default=20_000, help="iterations at most (default 20,000)")
    parser.add_argument("--gd", default="", help="step sizes for gradient descent beside the flow, e.g. 1e-3,5e-4")
    parser.add_argument("--per-k", type=int, default=0, metavar="M",
                        help="also time M iterations from each save time's state, against the units sliding there")  # fmt: skip
    parser.add_argument("--state", default="", help="write the run so far to this .npz after every save interval")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --state")
    parser.add_argument("--out", default="benchmarks/results/deep_scale.json")
    args = parser.parse_args(argv)
    gd = tuple(float(v) for v in args.gd.split(",") if v)
    import gflow  # noqa: F401  (float64)

    machine = machine_info()
    shape = (args.depth, args.width, args.points, args.t1, args.max_sliding, args.max_steps)
    if args.resume and not args.state:
        parser.error("--resume: needs --state PATH (the run to continue)")
    r = run(*shape, gd, args.state, args.per_k, args.rtol, args.atol, args.resume, args.motion_tol)
    s = r["stats"]
    print(f"depth {r['depth']}, width {r['width']}, {r['n']} points ({r['preactivations']} pre-activations), "
          f"t1 {r['t1']:g}, max_sliding {r['max_sliding']}, rtol {r['rtol']:g}, atol {r['atol']:g}, "
          f"motion_tol {r['motion_tol']}")  # fmt: skip
    print(f"status {r['status']} at t = {r['t']:.4g}; iterations {s['num_iterations']} "
          f"({s['num_accepted']} accepted, {s['num_rejected']} rejected); events {r['events']}")  # fmt: skip
    print(f"loss {r['loss0']:.4g} -> {r['loss']:.4g} (NumPy {r['loss_numpy']:.4g}); §3 drift {r['drift']:.1e}; "
          f"sliding at the end {r['sliding_at_end']}; wall {r['wall_s']:.1f} s (compilation included)")  # fmt: skip
    print(f"largest mode gap at the end {r['gap_all']:.1e}; at the {len(r['saved_t'])} save times "
          f"{r['gap_saved_max']:.1e}")  # fmt: skip
    print(f"energy identity: relative defect {r['energy_defect']:.1e} at the end, {r['energy_defect_saved_max']:.1e} "
          f"at most at the save times; largest loss rise between save times {r['loss_rise_max']:.1e}; loss change "
          f"of the moves onto the surfaces {r['surface_jump']:.1e}")  # fmt: skip
    if gd:
        print("time      gflow loss  " + "  ".join(f"GD η={lr:g}" for lr in gd) + "  (GD − GF) ratio")
        for i, t in enumerate(r["saved_t"]):
            gf, losses = r["saved_loss"][i], [r["gd"][str(lr)][i] for lr in gd]
            ratio = (losses[0] - gf) / (losses[-1] - gf) if len(gd) > 1 and losses[-1] != gf else float("nan")
            print(f"{t:7.2f}  {gf:10.3e}  " + "  ".join(f"{v:10.3e}" for v in losses) + f"  {ratio:8.3f}")
    if r["per_k"]:
        print("time     K  K max  slots  iterations  s/iteration  status")
        for row in r["per_k"]:
            print(f"{row['t']:6.2f}  {row['K']:3d}  {row['K_max']:5d}  {row['slots']:5d}  {row['iterations']:10d}  "
                  f"{row['s_per_iteration']:11.3f}  {row['status']}")  # fmt: skip
    print(describe(machine))
    save_record(args.out, "deep_scale", vars(args), machine, r)


if __name__ == "__main__":
    main()
