"""The wheel, installed where nothing else is: the engine and the headless commands need neither textual nor torch."""

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_the_wheel_alone_gives_the_engine_and_the_commands_without_textual_or_torch(tmp_path):
    # From a copy: setuptools builds in the source folder and leaves ./build behind.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(source)], check=True)
    (wheel,) = (tmp_path / "dist").glob("ranktop-*.whl")
    env_dir = tmp_path / "bare"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], check=True)  # pyzmq, msgspec, msgpack and numpy come with it

    code = (
        "import importlib.util, pkgutil, ranktop, ranktop.watch, ranktop.cli.main, ranktop.wire, ranktop.probe;"
        "assert importlib.util.find_spec('textual') is None and importlib.util.find_spec('torch') is None;"
        "print(sorted(i.name for i in pkgutil.iter_modules(ranktop.__path__)))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['cli', 'demo', 'probe', 'relay', 'transport', 'tui', 'watch', 'wire']"

    ranktop = env_dir / "bin" / "ranktop"
    help_text = subprocess.run([ranktop, "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0 and "watch" in help_text.stdout
    no_job = subprocess.run([ranktop, "--dir", str(tmp_path / "rdv"), "watch"], capture_output=True, text=True)
    assert no_job.returncode == 1 and no_job.stderr.startswith("ranktop: error: no running job found")
    assert len(no_job.stderr.strip().splitlines()) == 1
    # The TUI itself says what it needs, in one line.
    tui = subprocess.run([ranktop, "watch", "tcp://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert tui.returncode == 1 and "the TUI needs textual" in tui.stderr and "pip install 'ranktop[tui]'" in tui.stderr
