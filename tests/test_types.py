"""The package passes a type checker: mypy over the installed package, as much of it as is typed.

The wire's Structs (wire/messages.py) are the one definition of every field; the type checker holds the code
that builds them (the probe, the relay's digest, the simulator) and reads them to it: a misspelt field, a field
read that may be None, a message of one kind taken for another fail here rather than at a user's. Strict over
wire/, relay/, probe/, transport/, demo/, watch/ and cli/: everything but the TUI (numpy's many untyped returns
aside: ``--no-warn-return-any``). ``python tests/test_types.py`` prints the share of the
package's lines checked and, by folder, the lines left unchecked.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

#: Checked with ``--strict``: the contract, the relay, the probe, the transport, the demo and simulator, the
#: viewer's engine, analysis, model and offline tools (all of watch/), and the commands. A package name (PACKAGES)
#: checks every module of it.
STRICT = ["ranktop.wire", "ranktop.relay", "ranktop.probe", "ranktop.transport", "ranktop.demo", "ranktop.watch", "ranktop.cli"]
#: The names of STRICT that are packages.
PACKAGES = ("ranktop.wire", "ranktop.relay", "ranktop.probe", "ranktop.transport", "ranktop.demo", "ranktop.watch", "ranktop.cli")
#: The share of the package's lines STRICT covers, rounded down (a percentage): it may grow, never shrink.
COVERED_AT_LEAST = 87

ROOT = Path(__file__).resolve().parents[1]


def package_files() -> dict[str, Path]:
    """Every module of the package by its dotted name, read from pyproject's package-dir (the folders setuptools installs)."""
    table = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    files = {}
    for package, folder in re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', table, re.M):
        for path in sorted((ROOT / folder).glob("*.py")):
            files[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return files


def checked(module: str) -> bool:
    """Whether STRICT checks ``module``: named itself, or inside a package STRICT names."""
    return module in STRICT or any(module.startswith(package + ".") for package in PACKAGES)


def covered_share() -> tuple[int, int]:
    """(lines checked strictly, lines of the package): every line of a module's file counts, docstrings and blanks alike."""
    lines = {module: len(path.read_text().splitlines()) for module, path in package_files().items()}
    return sum(n for module, n in lines.items() if checked(module)), sum(lines.values())


def test_the_contract_and_the_engine_pass_the_type_checker_strictly(tmp_path):
    targets = [arg for name in STRICT for arg in (("-p", name) if name in PACKAGES else ("-m", name))]
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-warn-return-any", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), *targets],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_type_checker_finds_a_misspelt_field(tmp_path):
    """The check is no formality: a producer that misspells a field, or reads one a type does not have, fails."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from ranktop.wire.messages import Heartbeat, State\n"
        "def beat() -> Heartbeat:\n"
        "    return Heartbeat(job='j', rank=0, ts=1.0, stat=State())\n"
        "def last(state: State) -> int:\n"
        "    return state.last_step\n"
    )
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(bad)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 1
    assert 'Unexpected keyword argument "stat"' in out.stdout and '"State" has no attribute "last_step"' in out.stdout


def test_strict_names_modules_that_exist():
    """A STRICT name that no longer exists (a module moved or renamed) would be checked by nobody: mypy -m fails on it,
    and the share below would count nothing for it."""
    modules = package_files()
    assert [name for name in STRICT if name not in modules] == []


def test_the_checked_share_of_the_package_does_not_shrink():
    covered, total = covered_share()
    assert 100 * covered // total >= COVERED_AT_LEAST, f"{covered} of {total} lines ({100 * covered / total:.1f}%)"


if __name__ == "__main__":
    # `python tests/test_types.py`: the share checked and, by folder, the lines left unchecked.
    covered, total = covered_share()
    print(f"checked strictly: {covered} of {total} lines ({100 * covered / total:.1f}%)")
    left: dict[str, int] = {}
    for module, path in package_files().items():
        if not checked(module):
            folder = str(path.parent.relative_to(ROOT))
            left[folder] = left.get(folder, 0) + len(path.read_text().splitlines())
    for folder, n in sorted(left.items(), key=lambda item: -item[1]):
        print(f"  unchecked {folder + '/':<16} {n:6d} lines")
