"""The benchmarks of ``benchmarks/`` run end to end, as documented (``python -m
benchmarks.NAME``), at tiny sizes, and what they write is checked: every JSON carries the
machine, package versions and config, and the numbers they report agree with what they
are compared against (SciPy's reference, one device, gflow at rtol 1e-12, first-order
GD). No timing is checked.

The benchmark processes are started together by the first test (two at a time, one per
core) and each compiles its own programs; ``deep_scale`` runs at a small size (depth 3),
``through`` is left out (its problems are fixed and take minutes), as is PyTorch (not a
dependency).
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import share_compilation_cache

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 1200  # seconds for each benchmark process (a hang guard: each takes 1-4 min)
share_compilation_cache()  # the benchmark processes share some of their programs

RUNS = {
    "engine": ["--batches", "1,8", "--scipy-sample", "4", "--repeats", "1"],
    "gd": [
        "--seeds", "4", "--random-sets", "4", "--lrs", "1e-2,1e-3", "--t1", "20", "--equal-batch", "2",
        "--target", "1e-4", "--torch-seeds", "0", "--repeats", "1",
    ],
    "devices": ["--devices", "1,2", "--batch", "8", "--chunks", "", "--lanes", "4", "--t1", "20", "--repeats", "1"],
    "gpu": ["--allow-cpu", "--batches", "8", "--check", "4", "--gd-steps", "100", "--repeats", "1", "--t1", "20"],
    "scaling": ["--batches", "1,4", "--depths", "2", "--widths", "2", "--points", "2", "--t1s", "20", "--base-batch", "4"],
    "compile_time": ["--depths", "2", "--widths", "2", "--points", "3", "--t1", "5", "--cached"],
    "tail": ["--seeds", "6", "--members", "2", "--t0", "5", "--t1", "20", "--pids", "0.2:0.4"],
    "deep_scale": [
        "--depth", "3", "--width", "6", "--points", "8", "--t1", "5", "--max-sliding", "8", "--gd", "1e-3,5e-4",
        "--per-k", "10",
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``name -> (returncode, output, JSON record or None)`` for every benchmark in RUNS."""
    out = tmp_path_factory.mktemp("benchmarks")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=str(ROOT))

    def run(name):
        path = out / f"{name}.json"
        cmd = [sys.executable, "-m", f"benchmarks.{name}", *RUNS[name], "--out", str(path)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return -1, f"timed out after {TIMEOUT} s", None
        record = json.loads(path.read_text()) if path.exists() else None
        return proc.returncode, proc.stdout + proc.stderr, record

    with ThreadPoolExecutor(max_workers=2) as pool:  # one process per core
        return dict(zip(RUNS, pool.map(run, RUNS)))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_runs_and_records_provenance(runs, name):
    code, output, record = runs[name]
    assert code == 0, output[-3000:]
    assert record is not None, output[-3000:]
    assert record["benchmark"] == name
    for key in ("date", "config", "machine", "versions", "results"):
        assert record.get(key), key
    assert {"gflow", "jax", "diffrax"} <= set(record["versions"])


def test_engine_agrees_with_scipy(runs):
    """gflow's end points and crossings against SciPy's event-driven DOP853 (the
    benchmark's own comparison, at its default rtol 1e-10)."""
    res = runs["engine"][2]["results"]
    agreement = res["agreement"]
    assert agreement["n_compared"] + agreement["n_slid"] == 4
    assert agreement["n_compared"] >= 1
    assert agreement["max_weight_diff"] < 1e-7
    assert not agreement["crossing_mismatches"]
    assert all(b["all_success"] for b in res["batches"])
    assert [b["batch"] for b in res["batches"]] == [1, 8]


def test_gd_is_first_order_and_gflow_exact(runs):
    """GD's distance from the exact end point shrinks like its step (first order), while
    gflow at its default tolerances is far closer and keeps the SPEC §3 invariants."""
    for problem in runs["gd"][2]["results"]["accuracy"]:
        assert problem["exact"]["status_all_success"]
        by_lr = {row["lr"]: row["distance_max_abs"]["max"] for row in problem["gd"]}
        assert by_lr[1e-3] < by_lr[1e-2]
        assert 0.02 < by_lr[1e-3] / 1e-3 < 20  # max |Δθ| ≈ 1.2–1.8·η on 288 members (README)
        default = problem["gflow_default"]
        assert default["distance_max_abs"]["max"] < 1e-3 * by_lr[1e-3]
        assert default["drift"]["max"] < 1e-8
        assert min(row["drift"]["max"] for row in problem["gd"]) > 1e3 * default["drift"]["max"]


def test_devices_give_the_same_results(runs):
    """Two devices integrate the same members as one, bit for bit (the benchmark's check)."""
    rows = runs["devices"][2]["results"]
    two = [r for r in rows if r["setting"] == "simulate_batch D=2"]
    assert len(two) == 1
    assert two[0]["bitwise_equal_to_one_device"], two[0]["fields_differing"]


def test_gpu_script_on_the_cpu(runs):
    """``benchmarks/gpu.py`` with ``--allow-cpu``: every member finishes and agrees with
    its rerun at rtol 1e-12; the GD recipe was timed."""
    res = runs["gpu"][2]["results"]
    assert res["complete"]
    (record,) = res["records"]
    assert record["batch"] == 8 and record["all_success"]
    assert record["agreement"]["members"] == 4
    assert record["agreement"]["max_abs_weight_diff"] < 1e-7
    assert record["gd"]["steps_timed"] == 100 and record["gd"]["ratio_recipe_over_gflow"] > 0


def test_scaling_records_steps_and_events(runs):
    records = runs["scaling"][2]["results"]["records"]
    assert {r["sweep"] for r in records} >= {"batch", "t1"}
    for r in records:
        assert r["all_success"], r
        assert r["iterations"]["mean"] >= r["accepted_steps"]["mean"] > 0
        assert r["events"]["mean"] >= 0


def test_tail_agrees_with_scipy(runs):
    """``benchmarks/tail.py``: from gflow's state at ``t0`` SciPy's DOP853 and Radau, on
    the NumPy field, end where gflow's whole run ends; gflow restarted there does too; the
    switched bound never exceeds gflow's own steps."""
    res = runs["tail"][2]["results"]
    rows = res["tail"]["rows"]
    assert len(rows) == 2
    for r in rows:
        assert r["DOP853"]["success"] and r["Radau"]["success"]
        assert max(r["DOP853"]["error"], r["Radau"]["error"], r["gflow_tail_error"]) < 1e-6, r
        assert 0 < r["gflow_tail"] < r["gflow_total"]
    summary = res["tail"]["summary"]
    assert summary["switched_total_mean"] <= summary["gflow_total_mean"] and summary["ratio"] >= 1
    (controller,) = res["controller"]
    assert controller["iterations"] >= controller["accepted"] > 0 and controller["error_vs_tight"] < 1e-7


def test_compile_time_separates_compile_from_run(runs):
    """``benchmarks/compile_time.py``: the second call reran the same program (its weights
    equal the first's bit for bit), the compile time is the first call's excess (its
    phases as JAX times them within the first call), and with
    ``--cached`` a process that loads the program from the cache gets the same weights."""
    (row,) = runs["compile_time"][2]["results"]
    assert row["status"] == "REACHED_T1" and row["repeat_identical"]
    assert row["preactivations"] == 3 * 2 * 1
    assert abs(row["first_call_s"] - row["run_s"] - row["compile_s"]) < 1e-9
    # Compiling is work of this process: its CPU time, not only the wall clock, is spent.
    assert row["compile_cpu_s"] > 0.1 * row["compile_s"] > 0
    assert row["operations"] > 1000  # the integrator's program, not one of the small ones beside it
    # JAX's own timings of the first call's tracing, lowering and XLA compile: parts of it.
    phases = row["trace_s"], row["lower_s"], row["xla_s"]
    assert min(phases) > 0 and sum(phases) <= row["first_call_s"]
    # Two fresh processes on one cache folder (the first compiles, the second loads):
    # the same weights, and each first call timed.
    assert row["cached_identical"] and row["first_call_empty_cache_s"] > 0 and row["first_call_cached_s"] > 0


def test_compile_time_counts_operations_with_calls_inlined():
    """``inlined_ops`` counts a called function once per call, as XLA inlines it; the
    module is JAX's lowering of ``f(x) = g(x) + g(x + 1)``, ``g(x) = 2x``, counted by hand:
    main's constant and two adds, and g's constant and multiply twice."""
    from benchmarks.compile_time import inlined_ops

    module = """module @jit_f {
  func.func public @main(%arg0: tensor<f32>) -> (tensor<f32>) {
    %0 = call @g(%arg0) : (tensor<f32>) -> tensor<f32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %1 = stablehlo.add %arg0, %cst : tensor<f32>
    %2 = call @g(%1) : (tensor<f32>) -> tensor<f32>
    %3 = stablehlo.add %0, %2 : tensor<f32>
    return %3 : tensor<f32>
  }
  func.func private @g(%arg0: tensor<f32>) -> tensor<f32> {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %0 = stablehlo.multiply %arg0, %cst : tensor<f32>
    return %0 : tensor<f32>
  }
}"""
    assert inlined_ops(module) == 3 + 2 * 2


def test_filippov_pairs_a_reference_crossing_with_gflows_cut_of_that_unit():
    """The filippov benchmark's matching (no integration): a reference ``cross −1`` of a unit
    that gflow records as ``cut`` at that instant is one event; other cuts are left out, and
    without gflow's cuts the crossing stays unmatched."""
    from benchmarks.filippov import compare

    ours = [(1.0, 1, 4, 2, "cross", -1)]
    ref = [(1.0 + 1e-9, 1, 4, 2, "cross", -1), (1.0 + 1e-9, 2, 3, 2, "cross", -1)]
    cuts = [(1.0, 2, 1, 2, "cut", -1), (1.0, 2, 3, 2, "cut", -1), (3.0, 2, 3, 2, "cut", -1)]
    out = compare(ours, ref, 1e-6, cuts)
    assert out["matched"] == 2 and out["dt_events"] == pytest.approx(1e-9, rel=1e-6)
    assert not out["unmatched_gflow"] and not out["unmatched_reference"] and out["first_difference"] is None
    alone = compare(ours, ref, 1e-6)
    assert alone["unmatched_reference"] == [list(ref[1])] and alone["first_difference"]["what"] == "reference only"


def test_filippov_finds_units_that_share_a_surface():
    """Depth 3, teacher seed 53 at t = 0.1731633: at points 2 and 4 only first-layer neuron
    1 is active, so the second layer's inputs there are positive multiples of each other
    and each of its neurons has one surface for both points; the first layer's inputs (the
    Gaussian data) are never proportional."""
    import numpy as np

    from benchmarks.filippov import PROBLEMS, shared_surface, teacher_problem
    from gflow.reference import filippov_flow

    widths, n, _, _ = PROBLEMS["depth3"]
    params, X, Y = teacher_problem(53, widths, n)
    t = 0.1731633
    h = np.maximum(X @ np.asarray(filippov_flow(params, X, Y, t1=t).params[0]).T, 0.0)
    assert np.count_nonzero(h[2]) == np.count_nonzero(h[4]) == 1 and np.argmax(h[2]) == np.argmax(h[4])
    second = dict(t=t, reference=[t, 1, 2, 2, "slide_start", 0], gflow=None)
    assert shared_surface(params, X, Y, second) == [4]
    first = dict(t=t, reference=None, gflow=[t, 0, 1, 2, "cross", 1])
    assert shared_surface(params, X, Y, first) == []


def test_filippov_compares_the_events_before_a_reference_stop(tmp_path):
    """A reference run that stops on its limits (here ``max_sliding=1`` where two units
    slide at once, depth 3 teacher seed 9, ``t ≈ 0.081``) still counts: the benchmark
    compares gflow's records before the stop with the reference's events there
    (``partial``), and leaves the weights, which are of another time, uncompared. With a
    checkpoint folder the reference's state up to its stop is kept there."""
    import json

    import numpy as np

    from benchmarks.filippov import PROBLEMS, gflow_events, run_gflow, run_problems, teacher_problem

    widths, n, _, _ = PROBLEMS["depth3"]
    problem = teacher_problem(9, widths, n)
    rows, batch = run_problems("depth3", [9], [problem], widths, n, 0.2, 1e-10, 1e-12, (), 1e-6, (1, 10), tmp_path)
    (row,) = rows
    kept = json.loads((tmp_path / "depth3-9.json").read_text())
    assert kept["t"] < row["reference_t"] and len(kept["events"]) == row["events_reference"] > 0
    assert "max_sliding=1" in row["reference_error"] and 0.05 < row["reference_t"] < 0.2
    assert np.isnan(row["dtheta"]) and row["first_difference"] is None and row["matched"] >= 1
    ours = gflow_events(run_gflow([problem], 0.2, 1e-10, 1e-12)[0][0])
    assert row["matched"] == len([e for e in ours if e[0] < row["reference_t"] - 1e-6]) < len(ours)
    assert batch["B"] == 1


def test_filippov_tail_samples_gd_between_save_times():
    """The tail benchmark's GD arbiter (no integration): GD from one state over an interval
    in sampled pieces ends where one GD run of all the steps ends, and reports the largest
    ``|p|`` of the watched units over the samples, computed here from each sample's weights."""
    import numpy as np

    from benchmarks.filippov import PROBLEMS, teacher_problem
    from benchmarks.filippov_tail import _descend
    from gflow.reference import gradient_descent, preactivations

    widths, n, _, _ = PROBLEMS["depth3"]
    params, X, Y = teacher_problem(9, widths, n)
    watched = np.array([0, 3, 7, 12])
    end, largest, unit = _descend(params, X, Y, 1.0, 1.02, 1e-3, 0.005, watched)
    p, seen = params, []
    for _ in range(4):
        p = gradient_descent(p, X, Y, lr=1e-3, steps=5)
        seen.append(np.abs(np.concatenate([q.ravel() for q in preactivations(p, X)])[watched]))
    seen = np.array(seen)
    assert largest == seen.max() and unit == watched[np.argmax(seen.max(axis=0))]
    whole = gradient_descent(params, X, Y, lr=1e-3, steps=20)
    assert all(np.allclose(a, b, rtol=0, atol=1e-15) for a, b in zip(end, whole, strict=True))


def test_deep_scale_at_a_small_size(runs):
    """``benchmarks/deep_scale.py`` on a depth-3 net whose units slide: the flow reaches
    ``t1`` with the energy identity and the mode gaps at the integration error, its loss
    is NumPy's and never rises, GD approaches it at first order in ``η``, and the cost per
    iteration is measured from every save time with the units sliding there."""
    r = runs["deep_scale"][2]["results"]
    assert r["status"] == "REACHED_T1" and r["events"]["slide_start"] >= 2
    assert r["loss"] == pytest.approx(r["loss_numpy"], rel=1e-12)
    assert r["energy_defect_saved_max"] <= 1e-8 and r["drift"] <= 1e-9
    assert r["gap_saved_max"] <= 10 * (1e-10 + 1e-8)  # 10·(atol + rtol·|p|) at the defaults, |p| ≤ 1
    assert r["loss_rise_max"] <= 0.0
    # First order in η: Richardson's 2·GD(η/2) − GD(η) removes GD's O(η) error, and what
    # is left of its distance from the flow is O(η²).
    flow, big, small = (np.array(v) for v in (r["saved_loss"], r["gd"]["0.001"], r["gd"]["0.0005"]))
    assert np.max(np.abs(2 * small - big - flow)) <= 0.1 * np.max(np.abs(big - flow))
    rows = r["per_k"]
    assert [row["t"] for row in rows] == r["saved_t"]
    assert max(row["K"] for row in rows) >= 2
    for row in rows:
        assert row["iterations"] == 10 and row["status"] == "MAX_STEPS"
        assert row["K"] <= row["K_max"] and (row["slots"] >= row["K"] > 0 or row["slots"] == row["K"] == 0)
        assert row["s_per_iteration"] > 0


def test_deep_scale_resumes_where_it_stopped(tmp_path):
    """``deep_scale --state … --resume``: a run cut back to its first intervals (as if
    interrupted there) and resumed ends where the uninterrupted run ends, interval for
    interval, and a saved run of another configuration is refused."""
    import json

    from benchmarks import deep_scale

    shape = dict(depth=3, width=4, n=5, t1=1.0, max_sliding=8)
    whole = deep_scale.run(**shape, state=str(tmp_path / "whole.npz"))
    assert whole["status"] == "REACHED_T1" and len(whole["intervals"]) == 40
    saved = dict(np.load(tmp_path / "whole.npz"))
    saved["rows"] = json.dumps(json.loads(str(saved["rows"]))[:12])
    saved.update({k: v[:13] for k, v in saved.items() if k.startswith("saved_")})
    np.savez(tmp_path / "cut.npz", **saved)
    resumed = deep_scale.run(**shape, state=str(tmp_path / "cut.npz"), resume=True)
    assert resumed["intervals"] == whole["intervals"][:12] + resumed["intervals"][12:]
    for key in ("saved_loss", "saved_gaps", "loss", "loss_numpy", "drift", "stats", "events"):
        assert resumed[key] == whole[key], key
    assert [r["loss"] for r in resumed["intervals"]] == [r["loss"] for r in whole["intervals"]]
    with pytest.raises(ValueError, match="--resume"):
        deep_scale.run(**dict(shape, t1=2.0), state=str(tmp_path / "cut.npz"), resume=True)
