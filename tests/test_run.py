"""The README's test command (``tests/run.py``): CI trusts its exit status."""

import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent / "run.py"


def _run(*args):
    return subprocess.run([sys.executable, str(RUN), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_a_failing_file_fails_the_run_and_the_others_still_run(tmp_path):
    (tmp_path / "test_passes.py").write_text("def test_passes():\n    assert 1 + 1 == 2\n")
    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert 1 + 1 == 3\n")
    both = _run("--jobs", 2, tmp_path / "test_fails.py", tmp_path / "test_passes.py")
    assert both.returncode == 1, both.stdout
    assert "1 passed" in both.stdout and "1 failed" in both.stdout
    assert "1 of 2 test files passed" in both.stdout and "failed: test_fails.py" in both.stdout
    alone = _run(tmp_path / "test_passes.py")
    assert alone.returncode == 0, alone.stdout
    assert "1 of 1 test files passed" in alone.stdout


def test_bad_arguments_are_named():
    jobs = _run("--jobs", 0)
    assert jobs.returncode == 2 and "--jobs must be at least 1, got 0" in jobs.stderr
    missing = _run("tests/test_nothing_here.py")
    assert (
        missing.returncode == 2 and "no such test file" in missing.stderr and "test_nothing_here.py" in missing.stderr
    )


def test_quick_runs_only_the_marked_tests_and_starts_no_file_without_one(tmp_path):
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.quick\ndef test_quick():\n    assert 1 + 1 == 2\n\n"
        "def test_slow_and_failing():\n    assert 1 + 1 == 3\n"
    )
    (tmp_path / "test_unmarked.py").write_text("def test_fails():\n    assert 1 + 1 == 3\n")
    # Marks no test quick (a helper): started, collects nothing (pytest exit 5), counts as passed.
    (tmp_path / "test_helper.py").write_text(
        "import pytest\n\n@pytest.mark.quick\ndef helper():\n    pass\n\ndef test_fails():\n    assert 1 + 1 == 3\n"
    )
    files = [tmp_path / name for name in ("test_marked.py", "test_unmarked.py", "test_helper.py")]
    quick = _run("--quick", "--jobs", 2, *files)
    assert quick.returncode == 0, quick.stdout
    assert "1 passed, 1 deselected" in quick.stdout and "failed" not in quick.stdout
    assert "test_unmarked.py" not in quick.stdout  # not started
    assert "test_helper.py: exit 5" in quick.stdout
    assert (
        "quick tier: 2 of 2 test files passed" in quick.stdout and "1 without quick tests not started" in quick.stdout
    )
    full = _run(tmp_path / "test_marked.py")  # without --quick, every test runs
    assert full.returncode == 1 and "1 failed, 1 passed" in full.stdout
