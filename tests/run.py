"""Run the test suite: one pytest process per test file, several files at a time.

One process for the whole suite ran out of memory mappings and died inside XLA's compiler
(every compiled program keeps about 1,250: ``tests/xla_map_count.py``, Known limitations),
so each file gets its own. Most of a file's time is XLA compiling its programs, mostly on one core, so
files run side by side: on 2 cores two at a time took 1,072-1,084 s for the suite where
one after the other took about 1,440 s (2026-12-01). The slowest files start first; each file's output is printed when it ends, and the exit
status is 1 if any file failed (every file still runs).

``--quick`` runs only the tests marked ``@pytest.mark.quick`` (``pytest -m quick``), the
fast tier to run while developing; files with no such test are not started.

    python tests/run.py [--quick] [--jobs N] [pytest files...]
"""

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# The slowest files first (wall seconds, two at a time on 2 cores, 2026-12-01: 751, 580,
# 417, 141, 92, 71, 41, 29, 13; test_reference_deep.py and test_reference_scale.py 132 and
# 118 on 2026-12-06); files not listed start after these, largest first.
SLOWEST_FIRST = (
    "test_deep.py",
    "test_flow.py",
    "test_experiments_deep.py",
    "test_benchmarks.py",
    "test_reference_deep.py",
    "test_reference_scale.py",
    "test_experiments.py",
    "test_sweep.py",
    "test_regions.py",
    "test_reference.py",
    "test_theory.py",
)

# The same for the quick tier (wall seconds of the -m quick tests, two at a time on 2 cores
# shared with other jobs, 2026-12-03: 169, 102, 71; the others under 30).
QUICK_SLOWEST_FIRST = ("test_flow.py", "test_docs.py", "test_regions.py")


def _ordered(files, slowest_first=SLOWEST_FIRST):
    rank = {name: i for i, name in enumerate(slowest_first)}
    return sorted(files, key=lambda f: (rank.get(f.name, len(rank)), -f.stat().st_size))


QUICK = "quick"  # the marker of the fast tier (pyproject.toml)
_NO_TESTS = 5  # pytest's exit status when it collected no test


# A line that marks a test, a parametrization or the whole file quick.
_MARKS_QUICK = re.compile(
    rf"^\s*(@pytest\.mark\.{QUICK}\b|pytestmark\b.*\bmark\.{QUICK}\b|.*marks=.*\bmark\.{QUICK}\b)", re.M
)


def _has_quick_tests(path):
    """Whether a file marks any test quick (read, not imported: starting pytest on a file
    costs seconds of imports)."""
    return _MARKS_QUICK.search(path.read_text(encoding="utf-8")) is not None


def _run(path, quick=False):
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *(["-m", QUICK] if quick else []), str(path)],
        cwd=TESTS.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    print(f"===== {os.path.relpath(path, TESTS.parent)}: exit {proc.returncode}, {elapsed:.0f} s =====")
    print(proc.stdout, flush=True)
    return 0 if quick and proc.returncode == _NO_TESTS else proc.returncode


def _default_jobs():
    """One file per core, but no more than one per 6 GiB of memory: a file's pytest process
    holds up to 4.5 GiB at its peak (clean-clone CI, 2026-12-02; the summary line prints
    the largest), so a many-core machine with little memory would swap."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = None
    jobs = os.cpu_count() or 1
    return max(1, jobs if memory is None else min(jobs, memory // (6 << 30)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs",
        type=int,
        default=_default_jobs(),
        help="test files at once (default: CPU cores, at most one per 6 GiB)",
    )
    parser.add_argument("--quick", action="store_true", help="only the tests marked quick (pytest -m quick)")
    parser.add_argument("files", nargs="*", type=Path, help="test files (default: tests/test_*.py)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    files = [f.resolve() for f in args.files] or sorted(TESTS.glob("test_*.py"))
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"no such test file: {', '.join(missing)}")
    files = _ordered(files, QUICK_SLOWEST_FIRST if args.quick else SLOWEST_FIRST)
    skipped = []
    if args.quick:
        skipped = [f.name for f in files if not _has_quick_tests(f)]
        files = [f for f in files if _has_quick_tests(f)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        codes = list(pool.map(lambda f: _run(f, args.quick), files))
    failed = [f.name for f, code in zip(files, codes) if code != 0]
    summary = f"{len(files) - len(failed)} of {len(files)} test files passed in {time.perf_counter() - start:.0f} s"
    if args.quick:
        summary = f"quick tier: {summary}, {len(skipped)} without quick tests not started"
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
    summary += f" (largest file process: {peak:.1f} GiB resident at its peak)"
    print(summary + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
