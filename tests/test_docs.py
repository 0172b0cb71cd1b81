"""The documentation: the MkDocs site builds without a warning, the README runs as written,
and every figure it shows is in the repository.

The README's ```python blocks are executed in order, as one script, in a fresh process. In
those blocks a comment line starting at column 0 with ``# `` is expected output: all such
lines, in order, must match what the script prints, with ``...`` standing for any text
(doctest's ELLIPSIS; runs of whitespace compare equal). Comments that explain code go at the
end of a code line instead.
"""

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def _expected_output(code):
    return "".join(line[2:] + "\n" for line in code.splitlines() if line.startswith("# "))


@pytest.mark.quick
def test_the_docs_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.quick
def test_the_readme_code_runs_and_prints_what_it_shows(tmp_path):
    blocks = _python_blocks(README.read_text(encoding="utf-8"))
    assert blocks, "README.md has no ```python block"
    code = "\n".join(blocks)
    want = _expected_output(code)
    assert want, "README.md's python blocks show no output (# lines) to check"
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=1200, env=env
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    assert checker.check_output(want, ran.stdout, flags), f"README shows:\n{want}\nit prints:\n{ran.stdout}"


@pytest.mark.quick
def test_every_figure_the_readme_shows_is_in_the_repository():
    shown = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    assert shown, "README.md shows no figure"
    missing = [path for path in shown if not (ROOT / path).is_file()]
    assert not missing, f"README.md shows figures that are not in the repository: {missing}"
