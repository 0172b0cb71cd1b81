"""Tests of gflow.sweep and ``gflow sweep``: configs, sharding, resuming, corruption,
several processes.

Compilation dominates the cost, so every sweep in this process has the same shape (2-2-2,
the authors' data, chunks of ``CHUNK`` trajectories, ``LANES`` lanes, one device) and
compiles one program. The 4-device checks run in one subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (set before JAX starts): it writes a
sharded ``simulate_batch`` solution, then runs ``gflow sweep`` on one device until the last
test kills it. It is started by the first test and compiles while this process compiles.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

import gflow
from gflow import sweep
from gflow.cli import app

CHUNK, LANES = 16, 4
BASE = dict(widths=[2, 2, 2], data="authors", rtol=1e-10, atol=1e-12, chunk=CHUNK, lanes=LANES)
SMALL = dict(t1=20.0, trajectories=4 * CHUNK, seed=3)
KILLED = dict(t1=150.0, trajectories=32 * CHUNK, seed=11)  # ~50 ms a chunk: time to kill it after the first


def config(out, **kw):
    return dict(BASE, **(kw or SMALL), out=str(out))


def assert_same(a, b):
    """Two dicts of arrays with the same keys, equal bit for bit (NaNs in the same places)."""
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key, strict=True)


def flip(path):
    """Invert 8 bytes in the middle of a file."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8] = bytes(b ^ 0xFF for b in data[mid : mid + 8])
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """An uninterrupted single-process sweep of ``SMALL`` (4 chunks): the reference."""
    return sweep.run(config(tmp_path_factory.mktemp("small") / "sweep"))


# ---- four forced host devices, in a subprocess --------------------------------------------
_FOUR_DEVICES = textwrap.dedent(
    """
    import os, sys
    import jax, numpy as np
    import gflow
    from gflow import sweep, theory
    from gflow.cli import app

    assert len(jax.local_devices()) == 4, jax.local_devices()
    cfg = sweep.load_config(sys.argv[1])
    init = sweep._initial(cfg, np.arange(cfg["chunk"]))
    sol = gflow.simulate_batch(init, *theory.authors_data(), devices=4, **sweep._flow_options(cfg))
    np.savez(sys.argv[2] + ".tmp.npz", *[np.asarray(a) for a in jax.tree.leaves(sol)])
    os.replace(sys.argv[2] + ".tmp.npz", sys.argv[2])
    app(["sweep", sys.argv[1], "--devices", "1"], standalone_mode=False)
    """
)


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    """The 4-device subprocess: ``sharded`` (simulate_batch's solution leaves over 4
    devices, written first), then ``gflow sweep --devices 1`` on the ``KILLED`` config into
    ``folder/sweep`` (the program this process compiles too)."""
    folder = tmp_path_factory.mktemp("four_devices")
    path = folder / "killed.json"
    path.write_text(json.dumps(config(folder / "sweep", **KILLED)))
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    env = dict(os.environ, XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=4".strip())
    log = folder / "log.txt"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-c", _FOUR_DEVICES, str(path), str(folder / "sharded.npz")],
            env=env, stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    yield SimpleNamespace(proc=proc, folder=folder, config=path, sharded=folder / "sharded.npz", log=log)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def wait_for(condition, sub, timeout=900.0):
    """Poll ``condition()`` every 10 ms while the subprocess runs."""
    deadline = time.monotonic() + timeout
    while not condition():
        if sub.proc.poll() is not None:
            pytest.fail(f"the 4-device subprocess exited ({sub.proc.returncode}):\n{sub.log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for the 4-device subprocess")
        time.sleep(0.01)


def test_sharded_equals_unsharded(four_devices, authors):
    """``simulate_batch`` over 4 devices (``jax.pmap``, in the subprocess) and over one
    device here: the trajectories agree bit for bit (final weights, times, statuses,
    crossings, modes, step counts). With the same lanes per device both run the same
    per-device loop, and a trajectory's arithmetic does not depend on its lane, its place
    in the queue or its shard. The initial and final loss and the gradient norm are
    evaluated outside the loop by one vectorised call over each device's shard, whose
    compiled code depends on the shard size (16 here, 4 there), so they may differ in the last
    bit (the energy integral is held to the same bound): 1e-15
    relative (measured: at most 3.2e-16 on 1024 trajectories over 1, 2, 4 devices)."""
    cfg = sweep.load_config(four_devices.config)
    init = sweep._initial(cfg, np.arange(CHUNK))
    one = gflow.simulate_batch(init, *authors, devices=1, **sweep._flow_options(cfg))
    leaves = jax.tree_util.tree_flatten_with_path(one)[0]
    wait_for(four_devices.sharded.exists, four_devices)
    with np.load(four_devices.sharded) as f:
        sharded = [f[f"arr_{i}"] for i in range(len(f.files))]
    assert len(sharded) == len(leaves)
    for (path, a), b in zip(leaves, sharded):
        name = jax.tree_util.keystr(path)
        if name in (".loss", ".grad_norm", ".initial_loss", ".energy", ".saved_energy"):
            np.testing.assert_allclose(b, a, rtol=1e-15, atol=0, err_msg=name, strict=True)
        else:
            np.testing.assert_array_equal(np.asarray(a), b, err_msg=name, strict=True)


# ---- in this process ------------------------------------------------------------------------


def test_sweep_result_is_the_batch_result(small, authors):
    """The merged arrays hold, for trajectory ``i``, the start drawn from ``(seed, i)`` and
    what ``simulate_batch`` returns for it; the record has the provenance."""
    a, cfg = small["arrays"], small["config"]
    np.testing.assert_array_equal(a["index"], np.arange(4 * CHUNK))
    init = sweep._initial(cfg, np.arange(CHUNK, 2 * CHUNK))
    sol = gflow.simulate_batch(init, *authors, **sweep._flow_options(cfg))
    sl = slice(CHUNK, 2 * CHUNK)
    for layer in range(2):
        np.testing.assert_array_equal(a[f"init_{layer}"][sl], init[layer])
        np.testing.assert_array_equal(a[f"params_{layer}"][sl], sol.params[layer])
    np.testing.assert_array_equal(a["loss"][sl], sol.loss)
    np.testing.assert_array_equal(a["num_events"][sl], sol.stats["num_events"])
    np.testing.assert_array_equal(a["tolerance_factor"][sl], sol.stats["tolerance_factor"], strict=True)
    np.testing.assert_array_equal(a["n_slide_start"][sl], np.sum(sol.crossings.kind == gflow.Kind.SLIDE_START, 1))
    record = small["record"]
    assert record["seed"] == 3 and record["versions"]["gflow"] == gflow.__version__
    assert record["chunks"] == dict(record["chunks"], total=4, computed=4, reused=0, by_process={"0": 4})
    assert record["summary"]["status"] == {"REACHED_T1": 4 * CHUNK}
    on_disk = json.loads((Path(cfg["out"]) / "record.json").read_text())
    assert on_disk["fingerprint"] == record["fingerprint"] and on_disk["config"] == cfg


def test_start_depends_only_on_seed_and_index():
    """Trajectory ``i`` starts from ``init_params(fold_in(PRNGKey(seed), i), ...)``, the
    same bits whatever else is drawn with it (chunk size, position)."""
    for init in ("xavier_normal", {"method": "gaussian", "std": [0.5, 0.1], "zero_layers": [1]}):
        cfg = sweep.check_config(dict(BASE, init=init, t1=1.0, trajectories=100, seed=7))
        many, few = sweep._initial(cfg, np.arange(CHUNK)), sweep._initial(cfg, np.arange(5, 9))
        spec = dict(cfg["init"])
        method, zero = spec.pop("method"), spec.pop("zero_layers")
        direct = gflow.init_params(
            jax.random.fold_in(jax.random.PRNGKey(7), 7), (2, 2, 2), method, zero_layers=zero, **spec
        )
        for layer in range(2):
            np.testing.assert_array_equal(many[layer][5:9], few[layer])
            np.testing.assert_array_equal(few[layer][2], direct[layer])
        assert not np.array_equal(many[0][0], many[0][1])


def test_corrupt_and_partial_chunks_are_recomputed_not_merged(small, tmp_path):
    """A truncated chunk, one with flipped bytes and one whose arrays were altered and
    re-saved (valid zip, wrong checksum) are recomputed; the intact one is reused; the
    merged result equals the clean run's; stray temporary files are removed."""
    out = tmp_path / "sweep"
    first = sweep.run(config(out))
    assert first["chunks"]["computed"] == 4
    paths = sorted((out / "chunks").glob("chunk_*.npz"))
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[: len(data) // 2])  # an interrupted copy
    flip(paths[1])  # bit rot
    with np.load(paths[2]) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["loss"] = arrays["loss"] + 1e-15
    np.savez(paths[2], **arrays)  # edited content, old checksum
    (out / "chunks" / ".chunk_00003.npz.x.tmp").write_bytes(b"partial")  # a writer killed mid-write

    second = sweep.run(config(out))
    assert second["chunks"] == dict(second["chunks"], computed=3, reused=1)
    assert_same(second["arrays"], small["arrays"])
    assert not list((out / "chunks").glob(".*.tmp"))
    assert_same(sweep.load(out)["arrays"], small["arrays"])

    flip(out / "results.npz")
    with pytest.raises(ValueError, match="results.npz .* missing, corrupt"):
        sweep.load(out)


def test_processes_own_chunks_and_process_zero_merges(small, tmp_path):
    """Two processes: chunk ``k`` belongs to process ``k % 2``. Process 0 cannot merge
    before process 1's chunks exist (it says which are missing); after process 1 has run,
    a merge-only call merges, and the result equals the single-process run's."""
    cfg = config(tmp_path / "sweep")
    with pytest.raises(TimeoutError, match=r"2 of 4 chunks missing .*chunks 1, 3, owned by processes \[1\]"):
        sweep.run(cfg, process_index=0, process_count=2, wait=0.0)
    one = sweep.run(cfg, process_index=1, process_count=2)
    assert one["record"] is None and one["chunks"] == dict(one["chunks"], owned=2, computed=2, reused=0)
    merged = sweep.run(cfg, compute=False)
    assert merged["chunks"] == dict(merged["chunks"], owned=0, computed=0)
    assert merged["record"]["chunks"]["by_process"] == {"0": 2, "1": 2}
    assert_same(merged["arrays"], small["arrays"])


def test_cli_sweep(small, tmp_path):
    """``gflow sweep`` on a TOML config: the same result as the API, a summary table;
    ``--merge-only``; ``--num-processes/--process-id``; a bad config exits with status 2
    and names the key."""
    runner = CliRunner(env={"COLUMNS": "300"})  # no line wrapping in what is checked
    cfg = {k: v for k, v in config(tmp_path / "cli").items() if v is not None}
    path = tmp_path / "sweep.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items()))
    res = runner.invoke(app, ["sweep", str(path)])
    assert res.exit_code == 0, res.output
    assert "REACHED_T1 64" in res.output and "results.npz" in res.output
    assert_same(sweep.load(tmp_path / "cli")["arrays"], small["arrays"])

    res = runner.invoke(app, ["sweep", str(path), "--merge-only"])
    assert res.exit_code == 0, res.output
    assert "4 / 0 / 0 / 0" in res.output

    res = runner.invoke(app, ["sweep", str(path), "--out", str(tmp_path / "p1"), "--num-processes", "2", "--process-id", "1"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "process 0 merges" in res.output
    assert sorted(p.name for p in (tmp_path / "p1" / "chunks").glob("*.npz")) == ["chunk_00001.npz", "chunk_00003.npz"]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(cfg, t1=-1.0)))
    res = runner.invoke(app, ["sweep", str(bad)])
    assert res.exit_code == 2 and "t1: expected a finite float > 0" in res.output


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(widths=[2, 2]), "widths: expected a list"),
        (dict(widths=[2, 0, 2]), "widths: expected"),
        (dict(t1=0.0), "t1: expected a finite float > 0"),
        (dict(t1="inf"), "'inf' only with gtol, ltol or dtol"),
        (dict(trajectories=0), "trajectories: expected an integer >= 1"),
        (dict(trajectories=2.5), "trajectories: expected an integer"),
        (dict(chunk=True), "chunk: expected an integer"),
        (dict(seed=-1), "seed: expected an integer >= 0"),
        (dict(rtol=1.0), r"rtol: expected a float in \(0, 1\)"),
        (dict(motion_tol=0.0), "motion_tol: expected a finite float > 0"),
        (dict(weight_decay=-0.1), "weight_decay: expected a finite float >= 0"),
        (dict(loss="hinge"), "loss: expected one of"),
        (dict(solver="euler"), "solver: expected one of"),
        (dict(init="orthogonal"), "init: expected one of"),
        (dict(init={"method": "gaussian"}), "init: 'gaussian' takes the keys .*std required"),
        (
            dict(init={"method": "gaussian", "std": [1.0, 2.0, 3.0]}),
            "init: std: expected one finite float >= 0 or 2 of them",
        ),
        (dict(init={"method": "uniform_ball", "radius": "big"}), "init: radius: expected one finite float"),
        (dict(init={"method": "uniform_ball", "radius": 1.0, "zero_layers": [5]}), r"init: zero_layers: .* \[0, 2\)"),
        (dict(data="mnist"), "data: expected 'authors'"),
        (dict(widths=[3, 2, 2]), "data: 'authors' is two points"),
        (dict(data={"kind": "gaussian", "n": 0, "seed": 0}), "data.n: expected an integer >= 1"),
        (dict(data={"X": [[1.0, 0.0]], "Y": [[1.0]]}), r"data.Y: expected finite values of shape \(1, 2\)"),
        (dict(loss="logistic", widths=[2, 2, 1], data={"X": [[1.0, 0.0]], "Y": [0.5]}), "data.Y: expected 1 labels"),
        (dict(lanes=0), "lanes: expected an integer >= 1"),
        (dict(out=3), "out: expected a folder path"),
        (dict(epochs=10), "config: unknown key 'epochs'"),
    ],
)
def test_config_errors_name_the_key(change, message):
    with pytest.raises(ValueError, match=message):
        sweep.check_config(dict(BASE, **dict(SMALL, **change)))


def test_config_forms():
    """Defaults filled in; shorthand and dict forms normalised; a checked config checks to
    itself; JSON and TOML files read the same; a missing key and a bad file are named."""
    cfg = sweep.check_config(dict(widths=[2, 2, 2], t1=10, trajectories=5))
    assert cfg == dict(sweep.DEFAULTS, widths=[2, 2, 2], t1=10.0, trajectories=5,
                       init={"method": "xavier_normal", "zero_layers": []}, data={"kind": "authors"})  # fmt: skip
    assert sweep.check_config(cfg) == cfg
    deep = dict(widths=[3, 4, 4, 1], t1="inf", gtol=1e-9, trajectories=5, loss="logistic",
                data={"kind": "gaussian", "n": 6, "seed": 2}, init={"method": "uniform_ball", "radius": 0.1})  # fmt: skip
    assert sweep.check_config(deep)["t1"] == "inf"
    X, Y = sweep._data(sweep.check_config(deep))
    assert X.shape == (6, 3) and set(np.unique(Y)) <= {-1.0, 1.0}
    with pytest.raises(ValueError, match="trajectories: required key missing"):
        sweep.check_config(dict(widths=[2, 2, 2], t1=1.0))


def test_load_config_files(tmp_path):
    cfg = config("out-folder")
    (tmp_path / "a.json").write_text(json.dumps(cfg))
    (tmp_path / "a.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items()))
    from_json = sweep.load_config(tmp_path / "a.json")
    assert from_json == sweep.load_config(tmp_path / "a.toml") == sweep.check_config(cfg)
    assert sweep.load_config(tmp_path / "a.json", out="elsewhere")["out"] == "elsewhere"
    (tmp_path / "b.json").write_text("{not json")
    with pytest.raises(ValueError, match="b.json: expected a readable JSON or TOML"):
        sweep.load_config(tmp_path / "b.json")
    (tmp_path / "c.json").write_text(json.dumps(dict(cfg, chunk=0)))
    with pytest.raises(ValueError, match="c.json: chunk: expected an integer >= 1"):
        sweep.load_config(tmp_path / "c.json")


def test_killed_sweep_resumes_to_the_same_result(four_devices, tmp_path):
    """``gflow sweep`` in a subprocess, SIGKILLed once its first chunk file exists, leaves
    only complete chunks; the rerun (here) reuses exactly those, computes the rest, and its
    merged result equals an uninterrupted run's bit for bit. (Last in the file: the
    subprocess compiles its sweep while the tests above run.)"""
    sub = four_devices
    chunks = sub.folder / "sweep" / "chunks"
    wait_for(lambda: any(chunks.glob("chunk_*.npz")), sub)
    sub.proc.send_signal(signal.SIGKILL)
    sub.proc.wait()
    done = len(list(chunks.glob("chunk_*.npz")))
    assert 1 <= done < 32, f"killed after {done} of 32 chunks: the test needs an interrupted sweep"
    assert not (sub.folder / "sweep" / "results.npz").exists()

    cfg = sweep.load_config(sub.config)
    resumed = sweep.run(cfg)
    assert resumed["chunks"] == dict(resumed["chunks"], total=32, reused=done, computed=32 - done)
    assert sorted(resumed["record"]["chunks"]["by_process"]) == ["0"]
    whole = sweep.run(dict(cfg, out=str(tmp_path / "whole")))
    assert whole["chunks"]["computed"] == 32
    assert_same(resumed["arrays"], whole["arrays"])
    assert_same(sweep.load(sub.folder / "sweep")["arrays"], whole["arrays"])
