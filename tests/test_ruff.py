"""The code keeps the style it says it keeps: ruff's checks (pyproject.toml: pyflakes, pycodestyle's errors, the
line length) and its formatting, over every Python file of the checkout (the package, the tests, the benchmarks).

Run on the source, not the installed package: style is the checkout's, and a file that would be reformatted is
named in the failure, with ruff's diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing_to_say():
    out = ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_every_file_is_formatted_as_ruff_formats_it():
    out = ruff("format", "--no-cache", "--check", "--diff", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_check_is_no_formality(tmp_path):
    """ruff with this checkout's settings fails an unused import, a line over the length, and a file it would format."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = '" + "y" * 150 + "'\ndef f( a ):\n    return a\n")
    config = ("--config", str(ROOT / "pyproject.toml"))
    check = ruff("check", "--no-cache", *config, "--output-format", "concise", str(bad))
    fmt = ruff("format", "--no-cache", *config, "--check", str(bad))
    assert check.returncode == 1 and "F401" in check.stdout and "E501" in check.stdout
    assert fmt.returncode == 1
