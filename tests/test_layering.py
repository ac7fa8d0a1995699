"""The architecture's import rules, checked in fresh interpreters."""

import subprocess
import sys


def modules_after(statement: str) -> set[str]:
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_probe_imports_neither_torch_nor_the_tui():
    loaded = modules_after("from ranktop import probe; probe.step(); probe.phase('x')")
    assert "torch" not in loaded and "textual" not in loaded
    assert not any(m.startswith("ranktop.tui") for m in loaded)


def test_the_tui_never_imports_torch():
    loaded = modules_after("import ranktop.cli.main, ranktop.tui.app, ranktop.watch.session, ranktop.cli.demo")
    assert "textual" in loaded and "torch" not in loaded


def test_the_installed_package_is_what_the_tests_import():
    import ranktop.probe

    assert "site-packages" in ranktop.probe.__file__
