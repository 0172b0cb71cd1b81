"""Tests of gflow.experiments_deep (Theorems 4 and 5), ``gflow reproduce thm4|thm5`` and
``notebooks/deep_rank.ipynb``.

Checks recompute what the experiments report from the saved weights with NumPy (SVD,
forward pass, invariants), the teacher's ``B`` from its layers, and the bounds from their
closed forms. Sizes are tiny: depth 2 and 3 students of width 3 on 6 points.
"""

from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from conftest import finish_notebook, share_compilation_cache, start_notebook, stop_notebook
from typer.testing import CliRunner

from gflow import Status, experiments, theory
from gflow import experiments_deep as deep
from gflow.cli import app
from gflow.reference import balance_invariants
from gflow.solve import simulate_batch

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "deep_rank.ipynb"
SMALL = dict(depths=(2, 3), width=3, runs=2, widths=(3,), sweep_depth=3, n_points=6)
share_compilation_cache()  # the notebook runs thm4 and thm5 at SMALL too


@pytest.fixture(scope="module")
def thm5_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("thm5")
    return deep.thm5(**SMALL, t1=1e4, out=out), out


@pytest.fixture(scope="module")
def thm4_result(tmp_path_factory):
    return deep.thm4(**SMALL, lambdas=(1e-2,), gtol=1e-8, out=tmp_path_factory.mktemp("thm4"))


@pytest.fixture(scope="module")
def notebook(tmp_path_factory, thm5_result, thm4_result):
    """The notebook executing in a subprocess while the other tests run, started once this
    process has compiled thm4's and thm5's programs into the shared cache: started
    together, both compiled them at once, and on a slow 2-core CI machine the notebook's
    thm4 cell ran past its 600 s (CI of 358332d). Started after them it took 113 s
    (locally, 2026-12-02, against 154 s for thm5 and 213 s for thm4 compiling). The cell
    limit only guards against a hang."""
    proc = start_notebook(NOTEBOOK, tmp_path_factory.mktemp("deep_notebook"), 1800)
    yield proc
    stop_notebook(proc)


def test_notebook_started(notebook):
    assert notebook.poll() in (None, 0)


def _forward(params, X):
    h = X
    for W in params[:-1]:
        h = np.maximum(h @ W.T, 0.0)
    return h @ params[-1].T


def _check_measures(a, X, b, stage=None):
    """Recompute run ``b``'s reported measures from its saved weights."""
    depth, width = int(a["depth"][b]), int(a["width"][b])
    params = deep.unflatten(a["theta"][b], depth, width)
    sv = [np.linalg.svd(W, compute_uv=False) for W in params]
    r = np.array([s[0] / np.sqrt(np.sum(s**2)) for s in sv])
    pick = (lambda v: v[b]) if stage is None else (lambda v: v[b, stage])
    assert np.allclose(a["ratios"][b, :depth], r, rtol=1e-12) and np.all(np.isnan(a["ratios"][b, depth:]))
    assert np.isclose(pick(a["mean_r"]), r.mean(), rtol=1e-12)
    assert np.isclose(pick(a["harmonic"]), 1 / r.mean(), rtol=1e-12)
    norm_sq = sum(np.sum(W**2) for W in params)
    assert np.isclose(pick(a["norm_sq"]), norm_sq, rtol=1e-12)
    reach = np.max(np.abs(_forward(params, X)))
    assert np.isclose(pick(a["chain_bound"]), reach ** (1 / depth) * np.sqrt(depth / norm_sq), rtol=1e-10)
    # The chain of the proofs holds for any net: the average is at least the chain bound.
    assert pick(a["mean_r"]) >= pick(a["chain_bound"]) * (1 - 1e-12)
    return params


def test_thm5_measures_bounds_and_resume(thm5_result):
    result, out = thm5_result
    a, X, Y = result["arrays"], result["teacher"]["X"], np.asarray(result["teacher"]["Y"])[:, 0]
    assert len(a["depth"]) == 4 and set(a["depth"].tolist()) == {2, 3}
    teacher = theory.teacher_data(jax.random.PRNGKey(0), 6, (4, 3, 1), theorem=5, gap=0.1)
    B = np.prod([np.linalg.norm(W) for W in teacher.params]) ** (1 / 2)
    assert np.isclose(result["teacher"]["B"], B, rtol=1e-12)
    for b in range(4):
        params = _check_measures(a, X, b)
        norm = np.sqrt(sum(np.sum(W**2) for W in params))
        margin = np.min(Y * _forward(params, X)[:, 0]) / norm ** len(params)
        assert np.isclose(a["margin"][b], margin, rtol=1e-10, atol=1e-300)
        kp = len(params)
        if kp > 2:
            assert np.isclose(a["bound"][b], np.sqrt(kp / (2 * (kp + 1))) * (np.sqrt(2) / B) ** (2 / kp), rtol=1e-12)
        assert a["drift"][b] <= 1e-8  # SPEC §3 over [0, 1e4]
        assert a["energy_defect"][b] <= 1e-8 and a["mode_gap"][b] <= 1.0  # energy identity, modes
        assert np.all(np.diff(a["norm_t"][b][np.isfinite(a["norm_t"][b])][3:]) > 0)  # ‖θ‖ grows
    # A rerun on the same folder reuses every chunk and gives the same arrays.
    again = deep.thm5(**SMALL, t1=1e4, out=out)
    assert again["record"]["chunks"]["computed"] == 0
    assert all(np.array_equal(a[k], again["arrays"][k], equal_nan=True) for k in a)
    loaded = experiments.load(out)
    assert loaded["teacher"]["B"] == result["teacher"]["B"] and len(loaded["ts"]) == 33
    paths = deep.save_figures(loaded, out / "figures")
    assert [p.name for p in paths] == ["thm5_depth.png", "thm5_spectra.png", "thm5_time.png"]


def test_thm4_reaches_balanced_stationary_points(thm4_result):
    """At a stationary point of L + (λ/2)‖θ‖² every neuron is balanced (SPEC §3: the
    invariants decay like e^{−2λt}): checked on the saved weights."""
    result = thm4_result
    a, X = result["arrays"], result["teacher"]["X"]
    assert np.all(a["status"][:, -1] == int(Status.CONVERGED))
    for b in range(len(a["depth"])):
        params = _check_measures(a, X, b, stage=-1)
        q = balance_invariants(params)
        assert np.max(np.abs(q)) <= 1e-6 * sum(np.sum(W**2) for W in params)
        assert a["energy_defect"][b, -1] <= 1e-8 and a["mode_gap"][b, -1] <= 1.0  # of L + (λ/2)‖θ‖²
        kp = len(params)
        if kp > 2:
            assert np.isclose(a["bound"][b], result["teacher"]["B"] ** (-2 / kp), rtol=1e-12)
    assert result["summary"][0]["holds"]
    checks = {r["quantity"].split(":")[0]: r for r in result["summary"]}
    assert checks["energy identity"]["measured"] == f"{np.max(a['energy_defect']):.1e}"
    assert checks["mode gaps at the end"]["holds"]


def test_thm4_stages_continue_with_the_modes(tmp_path, monkeypatch):
    """Each weight-decay stage after the first starts from the weights and the modes the
    last one ended with, not by the signs: a neuron that died on its surface is frozen at
    ``p`` within the tolerance of 0, possibly on the active side, and would revive (see
    ``tests/test_flow.py::test_continuing_a_run_keeps_its_modes``). A member whose stage
    failed (here member 1's first stage, its status replaced by the spy) continues from
    its weights by the signs, and its status says so."""
    calls = []

    def spy(params, *args, **kwargs):
        sol = simulate_batch(params, *args, **kwargs)
        if not calls:
            sol = eqx.tree_at(lambda s: s.status, sol, np.array([sol.status[0], int(Status.SLIDING_LIMIT)]))
        calls.append((kwargs["weight_decay"], params, kwargs["modes"], sol))
        return sol

    monkeypatch.setattr(deep, "simulate_batch", spy)
    res = deep.thm4(**SMALL, lambdas=(1e-2, 1e-3, 1e-4), t1=20.0, out=tmp_path)
    assert len(calls) == 6 and [c[0] for c in calls] == [1e-2, 1e-3, 1e-4] * 2  # two (depth, width) chunks
    for chunk in (calls[:3], calls[3:]):
        assert chunk[0][2] is None  # the first stage decides by the signs
        for (_, _, _, before), (_, params, modes, _) in zip(chunk, chunk[1:]):
            assert all(np.array_equal(a, b) for a, b in zip(params, before.params))
            failed = ~experiments._success(before.status)
            assert np.array_equal(modes, np.where(failed[:, None], -1, before.final_modes))
    assert np.array_equal(res["arrays"]["status"][1, 0], int(Status.SLIDING_LIMIT))
    assert np.all(calls[1][2][1] == -1) and np.all(calls[1][2][0] >= 0)


def test_cli_reproduce_thm5(tmp_path, thm5_result):
    runner = CliRunner()
    args = ["reproduce", "thm5", "--depth", "2", "--depth", "3", "--width", "3", "--runs", "2", "--sweep-width", "3",
            "--sweep-depth", "3", "--points", "6", "--t1", "1e4", "--out", str(tmp_path), "--no-figures"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "thm5: measured vs the paper" in res.output and (tmp_path / "record.json").exists()
    mine = experiments.load(tmp_path)["arrays"]
    assert np.array_equal(mine["mean_r"], thm5_result[0]["arrays"]["mean_r"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(depths=(1,)), "depths"),
        (dict(depths=()), "depths"),
        (dict(width=0), "width"),
        (dict(lambdas=(1e-3, 1e-2)), "lambdas"),
        (dict(lambdas=(-1.0,)), "lambdas"),
    ],
)
def test_bad_input_names_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        deep.thm4(**{**SMALL, **kwargs})


def test_notebook_runs(notebook):
    finish_notebook(notebook, NOTEBOOK, 1800)


def test_points_reconnected_at_a_depth_10_start_keep_the_energy_identity():
    """``thm4``'s depth-10 start (seed 0, run 2, ``λ = 1e-2``, Kvaerno5 at the experiment's
    tolerances) to ``t = 1.51``: at t ≈ 1.4938 point 7, cut above the first layer, is
    reconnected, its pre-activations growing from 0; (6, 1, 7) leaves its round-off band
    while its twins (6, 1, 4…6) are 1e-3 off their surface. gflow 0.5.6 took it as
    arriving, slid the class and put it on its surface: the sixth layer's weights jumped by
    1.8e-2 and the energy identity failed by 2.3e-3 (now the unit takes its twins' side,
    :func:`gflow.twins.astray`). At t ≈ 1.50458 point 1 is reconnected through (3, 3, 1):
    every unit above it there takes its side at that instant (0.5.5 revived one layer, and
    the others followed one by one as they left their bands: defect 8.3e-8). The identity
    is checked with the loss in NumPy."""
    import gflow

    td = deep._teacher(0, 4, 8)
    params = [np.asarray(W[2]) for W in deep._starts(0, 10, 4, 3)]
    lam = 1e-2

    def objective(ps):
        return 0.5 * np.sum((_forward(ps, np.asarray(td.X)) - np.asarray(td.Y)) ** 2) + 0.5 * lam * sum(
            np.sum(W**2) for W in ps
        )

    sol = gflow.simulate(
        params, td.X, td.Y, weight_decay=lam, t1=1.51, rtol=1e-9, atol=1e-11, max_sliding=16, solver="kvaerno5"
    )
    drop = objective(params) - objective([np.asarray(W) for W in sol.params])
    assert abs(drop - float(sol.energy)) <= 1e-9 * drop
    point1 = {
        (r["layer"], r["neuron"])
        for r in sol.crossings.rows()
        if r["point"] == 1 and r["kind"] == "cross" and abs(r["t"] - 1.5045762) < 1e-6
    }
    assert {(3, 3), (5, 1), (6, 0), (7, 0), (8, 3)} <= point1, sorted(point1)
