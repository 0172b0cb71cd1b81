"""Command line: ``gflow demo`` (a small run of the authors' setting), ``gflow reproduce
thm1|thm2|thm3|authors`` (the paper's depth-2 experiments, :mod:`gflow.experiments`),
``gflow reproduce thm4|thm5`` (deep networks, :mod:`gflow.experiments_deep`),
``gflow sweep CONFIG`` (many trajectories in resumable chunks, :mod:`gflow.sweep`) and
``gflow version``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ._io import write_json

app = typer.Typer(help="gflow: exact gradient flow of bias-free ReLU networks.", no_args_is_help=True)


@app.callback()
def _main(
    cache: bool = typer.Option(
        True,
        "--cache/--no-cache",
        help="Keep compiled programs in JAX's persistent compilation cache: $GFLOW_CACHE_DIR, else "
        "$XDG_CACHE_HOME/gflow/jax or ~/.cache/gflow/jax (GFLOW_CACHE_DIR=off also turns it off).",
    ),
):
    """Turn on the compilation cache before any command compiles (gflow._cache)."""
    if cache:
        from ._cache import enable_compilation_cache

        enable_compilation_cache()


@app.command()
def demo(
    seeds: int = typer.Option(64, min=1, help="Number of Xavier-normal starts."),
    t1: float = typer.Option(150.0, min=0.0, help="GF time in SPEC units (the authors' 3e6 steps of lr 1e-4 on MSE)."),
    rtol: float = typer.Option(1e-10, help="Relative tolerance."),
    atol: float = typer.Option(1e-12, help="Absolute tolerance."),
    chunk: int = typer.Option(16, min=1, help="Trajectories per compiled batch call."),
    out: Path = typer.Option(Path("results/demo"), help="Folder for the figure and the JSON record."),  # noqa: B008
):
    """The authors' 2-2-2 two-point experiment (SPEC §4) with exact gradient flow: how
    many runs reach zero loss, how many end with a dead neuron or slid on a kink, the
    rank of W, and a figure of one trajectory over the cones D, S, S1, S2."""
    import jax
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import gflow
    from gflow.plot import plot_regions, plot_trajectory
    from gflow.theory import authors_data, stable_rank

    console = Console()
    X, Y = authors_data()
    params = [np.asarray(W) for W in gflow.init_params(jax.random.PRNGKey(0), (2, 2, 2), batch=seeds)]
    # Every run saves its state at geometric times (so the start is resolved) for the figure:
    # one compiled program for the table and the figure, where a second call to draw one run
    # would trace, compile (or load) and run a second one.
    ts = np.concatenate([[0.0], np.geomspace(min(1e-3, t1 / 2), t1, 599)]) if t1 > 0 else np.zeros(2)
    parts = []
    with Progress(console=console) as progress:
        task = progress.add_task("integrating", total=seeds)
        for start in range(0, seeds, chunk):
            sl = slice(start, min(start + chunk, seeds))
            part = gflow.simulate_batch([W[sl] for W in params], X, Y, t1=t1, rtol=rtol, atol=atol, saveat=ts)
            parts.append(part)
            progress.advance(task, sl.stop - sl.start)
    status = np.concatenate([p.status for p in parts])
    loss = np.concatenate([p.loss for p in parts])
    W_final = np.concatenate([p.params[0] for p in parts])
    kinds = np.concatenate([p.crossings.kind for p in parts])
    mse = loss / 2.0  # MSELoss = L / (n·d_out/2) = L/2 here
    converged = mse < 1e-4
    dead = np.all(np.einsum("bji,ni->bjn", W_final, X) <= 1e-9, axis=2).any(axis=1)
    slid = np.any(kinds == gflow.Kind.SLIDE_START, axis=1)
    srank = stable_rank(W_final)
    table = Table(title=f"Authors' setting, {seeds} Xavier-normal seeds, exact GF to t = {t1:g}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("runs finished (status success)", f"{np.sum([gflow.Status(int(s)).success for s in status])}/{seeds}")
    table.add_row("final MSE < 1e-4 (kept by the authors)", f"{converged.sum()}/{seeds}")
    table.add_row("ended with a dead neuron", f"{dead.sum()}/{seeds}")
    table.add_row("slid on a kink (Filippov)", f"{slid.sum()}/{seeds}")
    if converged.any():
        table.add_row(
            "stable rank of W, converged runs: min / median",
            f"{srank[converged].min():.3f} / {np.median(srank[converged]):.3f}",
        )
        table.add_row("converged runs with stable rank < 1.1", f"{np.sum(srank[converged] < 1.1)}")
    console.print(table)

    # The run with the most events, drawn from its saved states over the cones and as a
    # region timeline in the same colours (gflow.plot).
    example = int(np.argmax(np.concatenate([p.crossings.count for p in parts])))
    one = parts[example // chunk][example % chunk]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), width_ratios=(1, 1.25))
    plot_trajectory(one, X, ax=axes[0])
    axes[0].set_title(f"seed {example}: first-layer weights $w_j(t)$, $0 \\leq t \\leq {t1:g}$\n"
                      "(o: start, *: end, x: kink events)", fontsize=10)  # fmt: skip
    plot_regions(one, ax=axes[1])
    axes[1].set_title(f"seed {example}: region of each neuron over time", fontsize=10)
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    figure = out / "demo.png"
    fig.savefig(figure, dpi=110)
    record = dict(
        config=dict(seeds=seeds, t1=t1, rtol=rtol, atol=atol, init="xavier_normal", key=0, data="authors"),
        versions=dict(gflow=gflow.__version__, jax=jax.__version__),
        status=status.tolist(),
        final_loss=loss.tolist(),
        stable_rank=srank.tolist(),
        dead_neuron=dead.tolist(),
        slid=slid.tolist(),
    )
    write_json(out / "demo.json", record)
    console.print(f"wrote {figure} and {out / 'demo.json'}")


reproduce_app = typer.Typer(
    help="Reproduce the paper's depth-2 results (SPEC §4) with exact gradient flow: results, a summary table "
    "and PNG figures in --out. Interrupted runs resume from their finished chunks.",
    no_args_is_help=True,
)
app.add_typer(reproduce_app, name="reproduce")

_OUT_HELP = "Folder for chunks/, results.npz, record.json and the figures (default results/<experiment>)."


def _render(console, title, rows):
    """A Rich table from rows of dicts with the same keys; a ``holds`` column shows ✓/✗."""
    table = Table(title=title)
    keys = list(rows[0]) if rows else []
    for key in keys:
        table.add_column(key, justify="left" if key in ("quantity", keys[0]) else "right")
    for row in rows:
        cells = []
        for key in keys:
            v = row[key]
            cells.append({True: "[green]✓[/]", False: "[red]✗[/]", None: ""}[v] if key == "holds" else str(v))
        table.add_row(*cells)
    console.print(table)


def _reproduce(name, run, out, figures, fresh, console=None, save_figures=None):
    """Run ``run(out=..., progress=...)`` under a Rich progress bar, print its tables,
    write its figures; returns the result."""
    import shutil

    console = console or Console()
    if fresh and (out / "chunks").exists():
        shutil.rmtree(out / "chunks")
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task(f"{name}: chunks", total=None)

        def advance(done, total):
            progress.update(task, completed=done, total=total)

        result = run(out=out, progress=advance)
    chunks = result["record"]["chunks"]
    _render(console, f"{name}: measured vs the paper ({result['record']['wall_s']:.1f} s; "
                     f"chunks computed {chunks['computed']}, reused {chunks['reused']})", result["summary"])  # fmt: skip
    if "outcomes" in result:
        _render(console, f"{name}: region sequences and outcomes", result["outcomes"])
    console.print(f"results: {out / 'results.npz'}, {out / 'record.json'}")
    if figures:
        if save_figures is None:
            from gflow.experiments import save_figures

        paths = save_figures(result, out)
        console.print("figures: " + ", ".join(str(p) for p in paths))
    return result


_SEED = typer.Option(0, min=0, help="Master random seed (jax.random.PRNGKey).")
_FIGURES = typer.Option(True, "--figures/--no-figures", help="Write PNG figures next to the results.")
_FRESH = typer.Option(False, "--fresh", help="Discard finished chunks in --out and recompute everything.")


@reproduce_app.command("thm1")
def reproduce_thm1(
    datasets: int = typer.Option(10_000, "--datasets", "--seeds", min=1, help="Number of random data sets."),
    seed: int = _SEED,
    chunk: int = typer.Option(2_500, min=1, help="Data sets per chunk."),
    out: Path = typer.Option(Path("results/thm1"), help=_OUT_HELP),  # noqa: B008
    figures: bool = _FIGURES,
    fresh: bool = _FRESH,
):
    """Theorem 1 / Lemma 2: constructed zero-loss networks with rank W = 1 on random data."""
    from gflow import experiments

    _reproduce("thm1", lambda **kw: experiments.thm1(datasets, seed, chunk=chunk, **kw), out, figures, fresh)


@reproduce_app.command("thm2")
def reproduce_thm2(
    datasets: int = typer.Option(64, min=1, help="Number of random data sets (Assumptions 1-2)."),
    inits: int = typer.Option(
        16, "--inits", "--seeds", min=1, help="Random starts per data set inside Theorem 2's condition."
    ),
    seed: int = _SEED,
    t1: float = typer.Option(200.0, min=0.0, help="GF time."),
    rtol: float = typer.Option(1e-10, help="Relative tolerance."),
    atol: float = typer.Option(1e-12, help="Absolute tolerance."),
    chunk: int = typer.Option(128, min=1, help="Trajectories per compiled batch call (and per saved chunk)."),
    out: Path = typer.Option(Path("results/thm2"), help=_OUT_HELP),  # noqa: B008
    figures: bool = _FIGURES,
    fresh: bool = _FRESH,
):
    """Theorem 2: from small initialisations, converged runs have rank W = 2; the angle interval."""
    from gflow import experiments

    run = lambda **kw: experiments.thm2(datasets, inits, seed, chunk=chunk, t1=t1, rtol=rtol, atol=atol, **kw)  # noqa: E731
    _reproduce("thm2", run, out, figures, fresh)


@reproduce_app.command("thm3")
def reproduce_thm3(
    theta: list[float] = typer.Option(  # noqa: B008
        None, help="θ_x in degrees, in (90, 180); repeat for several (default 95, 110, 125, 140, 155, 170)."
    ),
    runs: int = typer.Option(1000, "--runs", "--seeds", min=1, help="Random starts (runs) per angle."),
    seed: int = _SEED,
    t1: float = typer.Option(200.0, min=0.0, help="GF time."),
    rtol: float = typer.Option(1e-10, help="Relative tolerance."),
    atol: float = typer.Option(1e-12, help="Absolute tolerance."),
    chunk: int = typer.Option(128, min=1, help="Trajectories per compiled batch call (and per saved chunk)."),
    out: Path = typer.Option(Path("results/thm3"), help=_OUT_HELP),  # noqa: B008
    figures: bool = _FIGURES,
    fresh: bool = _FRESH,
):
    """Theorem 3: P[E] against 2(θ_x/2π)², and the S1×S2 starts against the exact limit."""
    import numpy as np

    from gflow import experiments

    thetas = experiments.THM3_THETAS if not theta else [float(np.radians(t)) for t in theta]
    run = lambda **kw: experiments.thm3(thetas, runs, seed, chunk=chunk, t1=t1, rtol=rtol, atol=atol, **kw)  # noqa: E731
    _reproduce("thm3", run, out, figures, fresh)


@reproduce_app.command("authors")
def reproduce_authors(
    seeds: int = typer.Option(288, min=1, help="Number of starts (the authors ran 288)."),
    init: str = typer.Option("xavier_normal", help="xavier_normal | uniform_ball | thm3 (the authors' initialisers)."),
    radius: float = typer.Option(None, help="Disk radius for uniform_ball / thm3 (default 1e-4, the authors')."),
    seed: int = _SEED,
    t1: float = typer.Option(150.0, min=0.0, help="GF time (150 = the authors' 3e6 steps of lr 1e-4 on MSE)."),
    rtol: float = typer.Option(1e-10, help="Relative tolerance."),
    atol: float = typer.Option(1e-12, help="Absolute tolerance."),
    chunk: int = typer.Option(128, min=1, help="Trajectories per compiled batch call (and per saved chunk)."),
    out: Path = typer.Option(None, help=_OUT_HELP.replace("<experiment>", "authors or results/authors-<init>")),  # noqa: B008
    figures: bool = _FIGURES,
    fresh: bool = _FRESH,
):
    """The authors' experiment: their data, 2-2-2, GF time 150, runs with MSE < 1e-4 kept."""
    from gflow import experiments

    if out is None:
        out = Path("results/authors" if init == "xavier_normal" else f"results/authors-{init}")
    run = lambda **kw: experiments.authors(  # noqa: E731
        seeds, init, seed, chunk=chunk, t1=t1, rtol=rtol, atol=atol, radius=radius, **kw
    )
    _reproduce("authors", run, out, figures, fresh)


_DEPTHS = typer.Option(  # noqa: B008
    None, "--depth", help="Student depth k' (repeat for several; default 2 3 4 5 6 8 10)."
)
_WIDTHS = typer.Option(None, "--sweep-width", help="Widths of the width sweep (repeat; default 2 4 8).")  # noqa: B008
# Options shared by `reproduce thm4` and `reproduce thm5`.
_WIDTH = typer.Option(4, min=1, help="Hidden width of the depth sweep.")
_RUNS = typer.Option(3, "--runs", "--seeds", min=1, help="Random starts per (depth, width).")
_SWEEP_DEPTH = typer.Option(4, min=2, help="Depth of the width sweep.")
_POINTS = typer.Option(8, min=1, help="Data points (teacher: depth 2, width 3, inputs in R^4).")
_EVENTS = typer.Option("stop", help="stop (exact at every kink) | through (see gflow.simulate).")


def _deep_grid(depth, sweep_width):
    """The depths and the width-sweep widths of `reproduce thm4|thm5` (defaults if empty)."""
    from gflow import experiments_deep as deep

    return tuple(depth or ()) or deep.DEPTHS, tuple(sweep_width or ()) or (2, 4, 8)


@reproduce_app.command("thm4")
def reproduce_thm4(
    depth: list[int] = _DEPTHS,
    width: int = _WIDTH,
    runs: int = _RUNS,
    sweep_width: list[int] = _WIDTHS,
    sweep_depth: int = _SWEEP_DEPTH,
    points: int = _POINTS,
    lam: list[float] = typer.Option(  # noqa: B008
        None, "--lambda", help="Weight decays, decreasing (repeat; default 1e-2 1e-3)."
    ),
    seed: int = _SEED,
    events: str = _EVENTS,
    out: Path = typer.Option(Path("results/thm4"), help=_OUT_HELP),  # noqa: B008
    figures: bool = _FIGURES,
    fresh: bool = _FRESH,
):
    """Theorem 4: deeper nets at the stationary points of L + (λ/2)‖θ‖², λ swept down: rank ratios vs the bound."""
    from gflow import experiments_deep as deep

    depths, widths = _deep_grid(depth, sweep_width)
    run = lambda **kw: deep.thm4(  # noqa: E731
        depths, width, runs, seed, widths=widths,
        sweep_depth=sweep_depth, n_points=points, lambdas=tuple(lam or ()) or deep.THM4_LAMBDAS, events=events, **kw,
    )  # fmt: skip
    _reproduce("thm4", run, out, figures, fresh, save_figures=deep.save_figures)


@reproduce_app.command("thm5")
def reproduce_thm5(
    depth: list[int] = _DEPTHS,
    width: int = _WIDTH,
    runs: int = _RUNS,
    sweep_width: list[int] = _WIDTHS,
    sweep_depth: int = _SWEEP_DEPTH,
    points: int = _POINTS,
    t1: float = typer.Option(1e8, min=1.0, help="GF time (exponential loss: the norm grows like log t)."),
    dtol: float = typer.Option(None, help="Stop a run once tan ∠(θ, dθ/dt) < dtol (default: run to t1)."),
    seed: int = _SEED,
    events: str = _EVENTS,
    out: Path = typer.Option(Path("results/thm5"), help=_OUT_HELP),  # noqa: B008
    figures: bool = _FIGURES,
    fresh: bool = _FRESH,
):
    """Theorem 5: deeper nets under the exponential loss to t = 1e8: rank ratios and margin vs the bound."""
    from gflow import experiments_deep as deep

    depths, widths = _deep_grid(depth, sweep_width)
    run = lambda **kw: deep.thm5(  # noqa: E731
        depths, width, runs, seed, widths=widths,
        sweep_depth=sweep_depth, n_points=points, t1=t1, dtol=dtol, events=events, **kw,
    )  # fmt: skip
    _reproduce("thm5", run, out, figures, fresh, save_figures=deep.save_figures)


@app.command()
def sweep(
    config: Path = typer.Argument(..., help="Sweep config, JSON or TOML (keys: gflow.sweep.check_config)."),  # noqa: B008
    out: Path = typer.Option(None, help="Output folder (overrides the config's `out`)."),  # noqa: B008
    devices: int = typer.Option(
        None, min=1, help="Local devices to use (default: all; on a CPU: XLA_FLAGS, see the README)."
    ),
    merge_only: bool = typer.Option(False, "--merge-only", help="Compute nothing: merge the finished chunk files."),
    wait: float = typer.Option(
        None, min=0.0, help="Seconds process 0 waits for other processes' chunks (default 3600 with several, else 0)."
    ),
    coordinator: str = typer.Option(
        None, envvar="JAX_COORDINATOR_ADDRESS", help="host:port of process 0: start jax.distributed with it."
    ),
    num_processes: int = typer.Option(None, min=1, envvar="JAX_NUM_PROCESSES", help="Number of processes."),
    process_id: int = typer.Option(None, min=0, envvar="JAX_PROCESS_ID", help="This process, 0 .. N-1."),
    distributed: bool = typer.Option(
        False, "--distributed", help="jax.distributed.initialize() with cluster auto-detection (SLURM, Open MPI, ...)."
    ),
):
    """Many trajectories from one config, in chunks over the local devices and processes.

    Each finished chunk is written atomically to OUT/chunks/ with a checksum and its
    provenance; a rerun skips the finished ones. Chunk k belongs to process k % N;
    process 0 merges all of them into OUT/results.npz and OUT/record.json. Several
    processes: --num-processes N --process-id I (independent processes on a shared file
    system), plus --coordinator HOST:PORT to join them with jax.distributed."""
    import jax

    from gflow import sweep as sw

    console = Console()
    if (num_processes is None) != (process_id is None) and coordinator is None and not distributed:
        console.print("[red]error:[/] --num-processes and --process-id go together")
        raise typer.Exit(2)
    if coordinator is not None or distributed:  # first: before anything starts JAX's backend
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
        index, count = jax.process_index(), jax.process_count()
    elif num_processes is not None:
        index, count = process_id, num_processes
        if not index < count:
            console.print(f"[red]error:[/] --process-id: expected 0 .. {count - 1}, got {index}")
            raise typer.Exit(2)
    else:
        index, count = 0, 1
    try:
        cfg = sw.load_config(config, out=None if out is None else str(out))
    except ValueError as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    if cfg["out"] is None:
        console.print(f"[red]error:[/] {config}: out: expected an output folder in the config or --out, got none")
        raise typer.Exit(2)
    wait = (3600.0 if count > 1 else 0.0) if wait is None else wait
    local = jax.local_devices()
    if devices is not None and devices > len(local):
        console.print(f"[red]error:[/] --devices: expected at most {len(local)} (the local devices), got {devices}")
        raise typer.Exit(2)
    local = local[:devices]
    who = f"process {index} of {count}, " if count > 1 else ""
    console.print(f"sweep {config}: {who}{len(local)} {local[0].platform} device(s) -> {cfg['out']}")
    with Progress(console=console, transient=False) as bar:
        tasks = {}

        def advance(stage, done, total):
            if stage not in tasks:
                name = "chunks" if stage == "chunks" else "merge: chunk files ready"
                tasks[stage] = bar.add_task(name, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        try:
            result = sw.run(
                cfg, devices=devices, process_index=index, process_count=count, compute=not merge_only, wait=wait,
                progress=advance,
            )  # fmt: skip
        except TimeoutError as e:
            console.print(f"[red]{e}[/]")
            raise typer.Exit(1) from None
    c = result["chunks"]
    table = Table(title=f"sweep {config} ({who}{cfg['trajectories']} trajectories)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    counts = f"{c['total']} / {c['owned']} / {c['computed']} / {c['reused']}"
    table.add_row("chunks: total / own / computed / reused", counts)
    if c["computed"]:
        rate = f"{c['trajectories']} trajectories in {c['seconds']:.1f} s ({c['trajectories'] / c['seconds']:.0f}/s)"
        table.add_row("computed here (first chunk compiles)", rate)
    record = result["record"]
    if record is not None:
        s = record["summary"]
        table.add_row("chunks by process", ", ".join(f"{p}: {n}" for p, n in record["chunks"]["by_process"].items()))
        table.add_row("status", ", ".join(f"{k} {v}" for k, v in s["status"].items()))
        table.add_row("loss min / median / max", " / ".join(f"{s['loss'][k]:.3g}" for k in ("min", "median", "max")))
        table.add_row("events per trajectory mean / max", f"{s['events']['mean']:.2f} / {s['events']['max']}")
        table.add_row("trajectories that slid on a kink", str(s["slid"]))
        table.add_row("accepted steps mean / max", f"{s['accepted_steps']['mean']:.0f} / {s['accepted_steps']['max']}")
        table.add_row("wall time", f"{record['wall_s']:.1f} s")
    console.print(table)
    folder = Path(cfg["out"])
    if record is not None:
        console.print(f"results: {folder / 'results.npz'}, {folder / 'record.json'}")
    else:
        console.print(f"chunks: {folder / 'chunks'} (process 0 merges)")


@app.command()
def version():
    """Print the gflow version."""
    import gflow

    typer.echo(gflow.__version__)


if __name__ == "__main__":
    app()
