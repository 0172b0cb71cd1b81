"""Tests of gflow.experiments, gflow.plot, the ``gflow reproduce`` commands and the notebook.

Checks use values computed here independently of the code under test: a plain NumPy
forward pass and ``numpy.linalg.matrix_rank``, cone membership from ``w·x_i`` signs, the
exact ``S_1 × S_2`` limit of ``gflow.theory``, Wilson intervals from their formula.
Sizes are small; every engine experiment uses chunks of ``CHUNK`` runs so that the whole
file compiles one batch program and one single-trajectory program with saved states. The
notebook runs in a separate kernel, started by the first test and collected by the last
so that it overlaps the others.
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import finish_notebook, start_notebook, stop_notebook  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import gflow  # noqa: E402
from gflow import experiments as ex  # noqa: E402
from gflow import plot, theory  # noqa: E402
from gflow.cli import app  # noqa: E402

CHUNK = 16
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "depth2_rank.ipynb"


def relu(z):
    return np.where(z > 0, z, 0.0)


def outputs(W, V, X):
    """``N(x_i) = V σ(W x_i)`` for each row of ``X``: shape ``(n, d_out)``."""
    return relu(X @ W.T) @ V.T


def cones(W, X, tol=0.0):
    """Cone name of each row of ``W`` for data ``X``: active on ``x_i`` iff ``w·x_i > tol``.

    A located kink is exact to the solver's tolerance, so a neuron that stopped on the
    boundary of ``D`` may keep ``w·x_i`` of order 1e-11 on either side; ``tol`` absorbs it.
    """
    names = {(True, True): "S", (True, False): "S1", (False, True): "S2", (False, False): "D"}
    return [names[bool(w @ X[0] > tol), bool(w @ X[1] > tol)] for w in W]


# ---- the notebook, in the background -------------------------------------------------------
@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """The notebook executing in a subprocess while the other tests run (cwd a temp folder).
    Its limits only guard against a hang: CI machines run up to 2.5x slower than others."""
    cwd = tmp_path_factory.mktemp("notebook")
    proc = start_notebook(NOTEBOOK, cwd, 900)
    yield proc, cwd
    stop_notebook(proc)


def test_notebook_started(notebook):
    proc, _ = notebook
    assert proc.poll() in (None, 0)


# ---- Theorem 1 -------------------------------------------------------------------------------
def test_thm1_constructions_have_zero_loss_and_rank_one():
    r = ex.thm1(n_datasets=300, seed=3, chunk=128)
    a = r["arrays"]
    assert a["W"].shape == (300, 2, 2) and a["W"].dtype == np.float64
    for b in range(300):
        X, Y, W, V = a["X"][b], a["Y"][b], a["W"][b], a["V"][b]
        assert np.allclose(np.linalg.norm(X, axis=1), 1.0) and abs(np.linalg.det(X)) > 0
        assert np.max(np.abs(outputs(W, V, X) - Y)) <= 1e-9 * max(1.0, np.max(np.abs(V)))
        assert np.linalg.matrix_rank(W) == 1
        assert W[0] @ X[0] > 0 > W[0] @ X[1]  # w_1 in S1, w_2 = −c·w_1 in S2
        assert np.allclose(W[1], -a["c"][b] * W[0], rtol=1e-14, atol=0)
        if a["lemma2_applies"][b]:
            assert a["lemma2_loss"][b] <= 1e-16
    rows = {row["quantity"]: row for row in r["summary"]}
    assert rows["rank W = 1 (numpy matrix_rank)"]["measured"].startswith("300/300")
    assert all(row["holds"] in (True, None) for row in r["summary"])


# ---- Theorem 3 -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def thm3_result():
    return ex.thm3(np.radians([100.0, 150.0]), n_runs=32, seed=1, chunk=CHUNK)


def test_thm3_s1_s2_starts_stay_and_reach_the_exact_limit(thm3_result):
    a = thm3_result["arrays"]
    N = len(a["loss"])
    s12 = np.array([sorted(cones(a["W0"][b], a["X"][b])) == ["S1", "S2"] for b in range(N)])
    assert np.array_equal(s12, a["s1_s2_start"]) and s12.sum() >= 10
    assert np.all(a["V0"] == 0) and np.all(np.linalg.norm(a["W0"], axis=2) < 0.5)
    for b in np.flatnonzero(s12):
        start = cones(a["W0"][b], a["X"][b])
        assert a["regions_1"][b] == start[0] and a["regions_2"][b] == start[1]  # one interval: never moved
        assert cones(a["W"][b], a["X"][b]) == start
        W_lim, V_lim = theory.s1_s2_limit([a["W0"][b], a["V0"][b]], a["X"][b], a["Y"][b])
        assert np.max(np.abs(a["W"][b] - W_lim)) <= 1e-8 and np.max(np.abs(a["V"][b] - V_lim)) <= 1e-8
        assert np.max(np.abs(outputs(a["W"][b], a["V"][b], a["X"][b]) - a["Y"][b])) <= 1e-8
    # E* (corrected angle interval) holds on every S1×S2 start; the paper's E fails only by the angle's upper end.
    assert np.all(a["event_corrected"][s12])
    theta = a["theta_x"]
    upper = 3 * np.pi / 4 + (theta - np.pi / 2) / 2
    missed = s12 & ~a["event"]
    assert np.all(a["angle"][missed] > upper[missed])
    assert missed.sum() >= 1  # at 150° some S1×S2 starts leave the paper's interval


def test_thm3_summary_matches_the_arrays(thm3_result):
    a, rows = thm3_result["arrays"], thm3_result["summary"]
    assert [row["θ_x"] for row in rows] == ["100.0°", "150.0°"]
    for i, row in enumerate(rows):
        m = a["theta_index"] == i
        k, n = int(a["event"][m].sum()), int(m.sum())
        z = 1.959963984540054
        p = k / n
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
        centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
        assert row["P[E] (95% CI)"] == f"{p:.3f} [{max(centre - half, 0):.3f}, {min(centre + half, 1):.3f}]"
        assert row["bound 2(θ_x/2π)²"] == f"{2 * (a['theta_x'][m][0] / (2 * np.pi)) ** 2:.3f}"
        # E, recomputed from its definition with the final weights and loss
        for b in np.flatnonzero(m):
            W, t = a["W"][b], a["theta_x"][b]
            norms = np.linalg.norm(W, axis=1)
            cosang = W[0] @ W[1] / (norms[0] * norms[1])
            ang = np.arccos(np.clip(cosang, -1, 1))
            e = (
                a["loss"][b] <= 1e-8
                and np.all((norms > np.sqrt(3) / 2) & (norms < np.sqrt(0.25 + 4 / (3 * np.sin(t) ** 2))))
                and np.pi - t - 1e-9 <= ang <= 3 * np.pi / 4 + (t - np.pi / 2) / 2 + 1e-9
            )
            assert bool(a["event"][b]) == bool(e)


# ---- Theorem 2 -------------------------------------------------------------------------------
def test_thm2_starts_satisfy_the_condition_and_converged_runs_have_rank_two():
    r = ex.thm2(n_datasets=4, n_inits=4, seed=2, chunk=CHUNK)
    a = r["arrays"]
    for b in range(16):
        X, Y = a["X"][b], a["Y"][b]
        t = np.arccos(np.clip(X[0] @ X[1], -1, 1))
        radius = min(0.5, np.sqrt(3) / 2 * np.cos(t / 2))
        assert np.all(np.linalg.norm(a["W0"][b], axis=1) < radius)
        assert np.all(np.linalg.norm(a["V0"][b], axis=0) < 0.5)
        loss = 0.5 * np.sum((outputs(a["W"][b], a["V"][b], X) - Y) ** 2)
        assert loss == pytest.approx(a["loss"][b], rel=1e-6, abs=1e-20)
        if a["converged"][b]:
            assert np.linalg.matrix_rank(a["W"][b]) == 2
            assert a["final_cones"][b] == ",".join(sorted(cones(a["W"][b], X)))
    assert a["converged"].sum() >= 1


# ---- the authors' experiment, resumability, provenance ---------------------------------------
def test_authors_resumes_from_valid_chunks_and_recomputes_bad_ones(tmp_path):
    out = tmp_path / "authors"
    first = ex.authors(n_seeds=40, seed=4, chunk=CHUNK, out=out)
    chunks = sorted((out / "chunks").glob("chunk_*.npz"))
    assert [p.name for p in chunks] == ["chunk_00000.npz", "chunk_00001.npz", "chunk_00002.npz"]
    assert first["record"]["chunks"] == dict(total=3, computed=3, reused=0)

    chunks[0].unlink()  # deleted
    data = chunks[1].read_bytes()
    chunks[1].write_bytes(data[: len(data) // 2])  # truncated (an interrupted write)
    (out / "chunks" / ".chunk_00002.npz.abc.tmp").write_bytes(b"partial")  # a stray temp file
    second = ex.authors(n_seeds=40, seed=4, chunk=CHUNK, out=out)
    assert second["record"]["chunks"] == dict(total=3, computed=2, reused=1)
    assert first["arrays"].keys() == second["arrays"].keys()
    for key in first["arrays"]:
        assert np.array_equal(first["arrays"][key], second["arrays"][key]), key

    # A chunk whose bytes are valid but whose content changed fails its checksum.
    with np.load(chunks[2]) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["loss"] = arrays["loss"] + 1.0
    np.savez(chunks[2], **arrays)
    third = ex.authors(n_seeds=40, seed=4, chunk=CHUNK, out=out)
    assert third["record"]["chunks"]["computed"] == 1
    assert np.array_equal(third["arrays"]["loss"], first["arrays"]["loss"])

    # Another config in the same folder recomputes every chunk.
    other = ex.authors(n_seeds=40, seed=5, chunk=CHUNK, out=out)
    assert other["record"]["chunks"] == dict(total=3, computed=3, reused=0)


def test_authors_outcomes_and_provenance(tmp_path):
    out = tmp_path / "authors"
    r = ex.authors(n_seeds=48, seed=0, chunk=CHUNK, out=out)
    a = r["arrays"]
    X, Y = theory.authors_data()
    assert np.array_equal(a["W0"], np.asarray(gflow.init_params(jax.random.PRNGKey(0), (2, 2, 2), batch=48)[0]))
    mse = np.array([np.mean((outputs(a["W"][b], a["V"][b], X) - Y) ** 2) for b in range(48)])
    assert np.allclose(mse, a["mse"], rtol=1e-6, atol=1e-20)
    assert np.array_equal(a["kept"], mse < 1e-4)
    s = np.linalg.svd(a["W"], compute_uv=False)
    assert np.allclose(a["stable_rank_W"], np.sum(s**2, axis=1) / s[:, 0] ** 2)
    for b in range(48):
        final = cones(a["W"][b], X, tol=1e-9)
        assert bool(a["dead"][b]) == ("D" in final)
        if a["kept"][b]:
            assert "D" not in final and np.linalg.matrix_rank(a["W"][b]) == 2
    assert sum(row["runs"] for row in r["outcomes"]) == 48
    assert sum(row["kept"] for row in r["outcomes"]) == int(a["kept"].sum())

    record = json.loads((out / "record.json").read_text())
    assert record["experiment"] == "authors" and record["seed"] == 0
    assert record["config"] == r["config"] and record["config"]["n_seeds"] == 48 and record["config"]["t1"] == 150.0
    assert record["versions"]["gflow"] == gflow.__version__
    assert record["versions"]["jax"] == jax.__version__ and record["versions"]["x64"] is True
    loaded = ex.load(out)
    for key in a:
        assert np.array_equal(loaded["arrays"][key], a[key]), key
    assert loaded["outcomes"] == json.loads(json.dumps(r["outcomes"]))


def test_authors_initialisers():
    ball = ex.authors(n_seeds=16, init="uniform_ball", seed=0, chunk=CHUNK)["arrays"]
    assert np.all(np.linalg.norm(ball["W0"], axis=2) < 1e-4) and np.all(np.linalg.norm(ball["V0"], axis=2) < 1e-4)
    t3 = ex.authors(n_seeds=16, init="thm3", seed=0, chunk=CHUNK, radius=0.5)["arrays"]
    assert np.all(np.linalg.norm(t3["W0"], axis=2) < 0.5) and np.all(t3["V0"] == 0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ex.thm1(n_datasets=0), "n_datasets"),
        (lambda: ex.thm1(n_datasets=2.5), "n_datasets"),
        (lambda: ex.thm1(10, seed=-1), "seed"),
        (lambda: ex.thm2(2, 0), "n_inits"),
        (lambda: ex.thm2(2, 2, t1=-1.0), "t1"),
        (lambda: ex.thm3([1.0]), "thetas"),
        (lambda: ex.thm3([]), "thetas"),
        (lambda: ex.thm3(n_runs=3, chunk=0), "chunk"),
        (lambda: ex.authors(4, init="he_normal"), "init"),
        (lambda: ex.authors(4, radius=0.1), "radius"),
        (lambda: ex.authors(4, init="thm3", radius=-1.0), "radius"),
        (lambda: ex.authors(4, out=3), "out"),
        (lambda: ex.load("/nonexistent/folder"), "folder"),
        (lambda: plot.plot_cones(np.eye(3)), "X"),
        (lambda: plot.plot_histogram([1.0, 2.0], interval=(2.0, 1.0)), "interval"),
        (lambda: plot.plot_probability([1.0], [0.1, 0.2], [0.0], [0.3], theory.theorem3_bound), "thetas, p, lo, hi"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "expected" in str(info.value) and "got" in str(info.value)


# ---- figures and the command line ------------------------------------------------------------
def test_figures_and_plot_functions(thm3_result, tmp_path):
    paths = ex.save_figures(thm3_result, tmp_path)
    assert sorted(p.name for p in paths) == ["thm3_angles.png", "thm3_example.png", "thm3_probability.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)

    authors = ex.authors(n_seeds=32, seed=0, chunk=CHUNK)
    index = int(np.argmax(authors["arrays"]["n_events"]))
    assert authors["arrays"]["n_events"][index] >= 1
    sol, X, Y = ex.example(authors, index)
    assert np.allclose(sol.params[0], authors["arrays"]["W"][index], atol=1e-8)
    points, neurons = plot.crossing_points(sol, X)
    cr = sol.crossings
    assert len(points) == int(np.sum(cr.layer[: int(cr.count)] == 0)) >= 1
    for w, e in zip(points, np.flatnonzero(cr.layer[: int(cr.count)] == 0)):
        assert abs(w @ X[cr.point[e]]) <= 1e-12  # on the kink line of its event

    fig, axes = plt.subplots(2, 3)
    assert plot.plot_trajectory(sol, X, ax=axes[0, 0]) is axes[0, 0]
    assert plot.plot_regions(sol, ax=axes[0, 1]) is axes[0, 1]
    assert len(axes[0, 1].patches) == sum(len(nr.intervals) for nr in sol.regions(0))
    ax_l, ax_s = plot.plot_loss_and_singular_values(sol, X, Y, axes=axes[1, :2])
    assert ax_l.get_yscale() == "log" and ax_s.get_xscale() == "log"
    assert plot.plot_stable_rank(authors["arrays"]["stable_rank_W"], ax=axes[0, 2]) is axes[0, 2]
    assert plot.plot_angles([2.0, 2.5], (1.5, 2.6), (1.4, 3.0), ax=axes[1, 2]) is axes[1, 2]
    plt.close(fig)
    with pytest.raises(ValueError, match="solution"):
        plot.plot_trajectory("not a solution", X)


def test_cli_reproduce(tmp_path):
    runner = CliRunner(env={"COLUMNS": "200"})
    res = runner.invoke(app, ["reproduce", "thm1", "--datasets", "50", "--chunk", "20", "--out", str(tmp_path / "t1")])
    assert res.exit_code == 0, res.output
    assert "measured" in res.output and "paper" in res.output and "50/50" in res.output
    assert (tmp_path / "t1" / "thm1.png").exists() and (tmp_path / "t1" / "record.json").exists()
    assert len(list((tmp_path / "t1" / "chunks").glob("chunk_*.npz"))) == 3

    args = [
        "reproduce",
        "authors",
        "--seeds",
        "20",
        "--chunk",
        str(CHUNK),
        "--no-figures",
        "--out",
        str(tmp_path / "a"),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "stable rank W" in res.output and "region sequences" in res.output
    assert "computed 2, reused 0" in res.output
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "computed 0, reused 2" in res.output

    res = runner.invoke(app, ["reproduce", "thm3", "--theta", "60", "--runs", "4", "--out", str(tmp_path / "t3")])
    assert res.exit_code != 0 and "thetas" in str(res.exception)
    res = runner.invoke(app, ["version"])
    assert res.exit_code == 0 and res.output.strip() == gflow.__version__


def test_cli_demo_draws_the_whole_run(tmp_path, monkeypatch):
    """`gflow demo`'s figure: gflow.plot's trajectory and timeline panels of one run over
    the whole [0, t1] (chunks of CHUNK and 600 save times: the programs this file compiles)."""
    drawn = {}
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, path, **kw: drawn.update(fig=fig, path=path, **kw))
    res = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["demo", "--seeds", str(CHUNK), "--chunk", str(CHUNK), "--out", str(tmp_path / "demo")]
    )
    assert res.exit_code == 0, res.output
    assert drawn["path"] == tmp_path / "demo" / "demo.png" and (tmp_path / "demo" / "demo.json").exists()
    cones, timeline = drawn["fig"].axes[:2]
    assert timeline.get_xlim() == (0.0, 150.0) and "the run ends at t = 150" in timeline.get_xlabel()
    assert r"0 \leq t \leq 150" in cones.get_title()
    assert timeline.get_legend() is not None and len(timeline.patches) >= 2
    plt.close(drawn["fig"])


# ---- the notebook ---------------------------------------------------------------------------
def test_notebook_runs(notebook):
    proc, cwd = notebook
    finish_notebook(proc, NOTEBOOK, 1200)
    assert not any(p.suffix == ".png" for p in NOTEBOOK.parent.iterdir())  # nothing written next to it
