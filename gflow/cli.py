"""Command line: ``gflow demo`` (a small run of the authors' setting), ``gflow reproduce
thm1|thm2|thm3|authors`` (the paper's depth-2 experiments, :mod:`gflow.experiments`) and
``gflow version``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ._io import write_json

app = typer.Typer(help="gflow: exact gradient flow of bias-free ReLU networks.", no_args_is_help=True)


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
    from gflow.plot import plot_cones
    from gflow.theory import authors_data, stable_rank

    console = Console()
    X, Y = authors_data()
    params = [np.asarray(W) for W in gflow.init_params(jax.random.PRNGKey(0), (2, 2, 2), batch=seeds)]
    parts = []
    with Progress(console=console) as progress:
        task = progress.add_task("integrating", total=seeds)
        for start in range(0, seeds, chunk):
            sl = slice(start, min(start + chunk, seeds))
            parts.append(gflow.simulate_batch([W[sl] for W in params], X, Y, t1=t1, rtol=rtol, atol=atol))
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
        table.add_row("stable rank of W, converged runs: min / median", f"{srank[converged].min():.3f} / {np.median(srank[converged]):.3f}")
        table.add_row("converged runs with stable rank < 1.1", f"{np.sum(srank[converged] < 1.1)}")
    console.print(table)

    # One trajectory with crossings, drawn over the cones.
    example = int(np.argmax(np.concatenate([p.crossings.count for p in parts])))
    ts = np.linspace(0.0, min(t1, 20.0), 400)
    one = gflow.simulate([W[example] for W in params], X, Y, t1=float(ts[-1]), rtol=rtol, atol=atol, saveat=ts)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    plot_cones(X, one.ys[0], ax=axes[0])
    axes[0].set_title(f"seed {example}: first-layer weights $w_j(t)$")
    for nr in one.regions(0):
        for iv in nr.intervals:
            axes[1].barh(nr.neuron, iv.t_end - iv.t_start, left=iv.t_start, height=0.6)
            axes[1].text((iv.t_start + iv.t_end) / 2, nr.neuron, iv.label, ha="center", va="center", fontsize=8)
    axes[1].set_yticks(range(2), ["neuron 1", "neuron 2"])
    axes[1].set_xlabel("t")
    axes[1].set_title("regions over time")
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    figure = out / "demo.png"
    fig.savefig(figure, dpi=120)
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


def _reproduce(name, run, out, figures, fresh, console=None):
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


@app.command()
def version():
    """Print the gflow version."""
    import gflow

    typer.echo(gflow.__version__)


if __name__ == "__main__":
    app()
