"""The architecture's import rules (docs/architecture.md), checked on the installed package.

Layers import downward only: wire <- transport <- relay <- probe, transport <- watch <- cli, watch <- tui;
inside watch, its rooms too: model (what a snapshot says: the floor) <- engine (gathers) <- analysis (judges)
<- offline, and the top-level modules that join them (aggregator, session, refresher, capture) above all four;
the model imports no other room, the engine never imports analysis. The screens and the commands (tui, cli)
read watch through its face (``ranktop.watch``) and its model, never the engine, the analysis, the aggregator or
the session's module. And no module
imports itself through others (no import circle, anywhere).
Two kinds of check: every import statement in the source, wherever it stands
(a lazy import inside a function counts as much as one at the top), and what
a fresh interpreter really loads.
"""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import ranktop

#: watch's top-level modules that join its rooms (the aggregator builds snapshots of what the engine gathered).
_JOINERS = ("ranktop.watch.aggregator", "ranktop.watch.session", "ranktop.watch.refresher", "ranktop.watch.capture")

#: What of watch the screens and the commands never import: its engine and analysis rooms, and the two modules that
#: join them (the aggregator, the session's module). What they need of those, the face (watch/__init__.py) names.
_BEHIND_THE_FACE = ("ranktop.watch.engine", "ranktop.watch.analysis", "ranktop.watch.aggregator", "ranktop.watch.session")

#: layer -> the packages (and outside libraries) it must never import.
CONTRACTS = {
    "ranktop.wire": (
        "ranktop.transport",
        "ranktop.relay",
        "ranktop.probe",
        "ranktop.watch",
        "ranktop.cli",
        "ranktop.tui",
        "ranktop.demo",
        "textual",
        "torch",
        "zmq",
        "numpy",
    ),
    "ranktop.transport": (
        "ranktop.relay",
        "ranktop.probe",
        "ranktop.watch",
        "ranktop.cli",
        "ranktop.tui",
        "ranktop.demo",
        "textual",
        "torch",
        "numpy",
    ),
    "ranktop.relay": ("ranktop.probe", "ranktop.watch", "ranktop.cli", "ranktop.tui", "ranktop.demo", "textual", "torch", "numpy"),
    "ranktop.probe": ("ranktop.watch", "ranktop.cli", "ranktop.tui", "ranktop.demo", "textual", "numpy"),
    "ranktop.watch": ("ranktop.probe", "ranktop.relay", "ranktop.cli", "ranktop.tui", "ranktop.demo", "textual", "torch", "rich"),
    # the screens and the commands read watch through its face (watch/__init__.py) and its model only
    "ranktop.cli": ("ranktop.demo", "textual", "torch", *_BEHIND_THE_FACE),
    "ranktop.tui": ("ranktop.probe", "ranktop.cli", "ranktop.demo", "torch", *_BEHIND_THE_FACE),
    # watch's rooms (docs/architecture.md): the model is the floor, the frozen records every room speaks (it
    # imports no other room); the engine gathers into them and judges nothing; analysis judges; nothing of them
    # imports what joins them.
    "ranktop.watch.model": ("ranktop.watch.engine", "ranktop.watch.analysis", "ranktop.watch.offline", *_JOINERS),
    "ranktop.watch.engine": ("ranktop.watch.analysis", "ranktop.watch.offline", *_JOINERS),
    "ranktop.watch.analysis": ("ranktop.watch.offline", *_JOINERS),
}

#: watch's top-level leaves: what every room may import; they import no room (``errors`` only, of watch).
LEAVES = ("ranktop.watch.errors", "ranktop.watch.format", "ranktop.watch.statuses", "ranktop.watch.optional")


def modules_after(statement: str) -> set[str]:
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in the file names, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = ".".join([package, *path.relative_to(_root(package)).with_suffix("").parts])
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level)[0]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from ranktop import tui`
    return names


def _root(package: str) -> Path:
    for path in ranktop.__path__:
        candidate = Path(path, *package.split(".")[1:])
        if candidate.is_dir():
            return candidate
    raise AssertionError(f"{package} is not installed")


@pytest.mark.parametrize("package", sorted(CONTRACTS))
def test_no_layer_imports_a_layer_above_it(package):
    forbidden = CONTRACTS[package]
    broken = []
    for path in sorted(_root(package).rglob("*.py")):
        for name in imported_modules(path, package):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                broken.append(f"{path.name}: {name}")
    assert not broken, f"{package} imports what it must not: {broken}"


@pytest.mark.parametrize("leaf", LEAVES)
def test_the_top_level_leaves_of_watch_import_no_room(leaf):
    path = _root("ranktop.watch") / (leaf.rsplit(".", 1)[1] + ".py")
    watch = {n for n in imported_modules(path, "ranktop.watch") if n.startswith("ranktop.watch.")}
    assert all(n == "ranktop.watch.errors" or n.startswith("ranktop.watch.errors.") for n in watch), f"{leaf} imports {sorted(watch)}"


def test_watch_is_rooms_not_a_hallway():
    """At most 12 modules at watch's top level (``__init__`` counted): the rest lives in rooms named after who lives there."""
    top = sorted(p.name for p in _root("ranktop.watch").glob("*.py"))
    rooms = sorted(p.name for p in _root("ranktop.watch").iterdir() if (p / "__init__.py").is_file())
    assert len(top) <= 12, top
    assert rooms == ["analysis", "engine", "model", "offline"]


def test_the_probe_imports_neither_torch_nor_the_viewer():
    loaded = modules_after("from ranktop import probe; probe.step(); probe.phase('x')")
    assert "torch" not in loaded and "textual" not in loaded and "numpy" not in loaded  # numpy is the viewer's
    assert not any(m.startswith(("ranktop.tui", "ranktop.watch", "ranktop.cli")) for m in loaded)


def test_the_engine_and_every_headless_command_run_without_textual_or_torch():
    loaded = modules_after("import ranktop.watch, ranktop.cli.main")
    assert "textual" not in loaded and "torch" not in loaded and "rich" not in loaded


def test_the_tui_never_imports_torch():
    loaded = modules_after("import ranktop.cli.main, ranktop.tui.app, ranktop.watch.session, ranktop.cli.demo")
    assert "textual" in loaded and "torch" not in loaded


def test_every_module_of_the_installed_package_imports():
    """A module the wheel left out, or one that only imports from a checkout, fails here (one fresh interpreter)."""
    names = sorted(info.name for info in pkgutil.walk_packages(ranktop.__path__, "ranktop."))
    skip = ("ranktop.probe.autostart", "ranktop.probe.trace_summary")  # a start-up hook on torch's import; a script
    wanted = [n for n in names if n not in skip and not n.endswith("__main__") and not n.startswith("ranktop.demo")]
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        print(f'{name}: {exc!r}')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *wanted], capture_output=True, text=True, check=True)
    assert out.stdout == ""
    assert {
        "ranktop.watch.engine.requests",
        "ranktop.cli.ping",
        "ranktop.tui.panes.status",
        "ranktop.tui.screens.help",
        "ranktop.tui.render.palette",
        "ranktop.wire.settings",
    } <= set(names)


def test_the_installed_package_is_what_the_tests_import():
    import ranktop.probe

    assert "site-packages" in ranktop.probe.__file__


def _module_graph() -> dict[str, set[str]]:
    """ranktop module -> the ranktop modules it imports (at the top, inside a function, or for types only)."""
    packages = sorted({".".join(info.name.split(".")[:2]) for info in pkgutil.iter_modules(ranktop.__path__, "ranktop.")})
    graph: dict[str, set[str]] = {}
    for package in packages:
        root = _root(package)
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join([package, *parts])
            graph[name.removesuffix(".__init__")] = {n for n in imported_modules(path, package) if n.startswith("ranktop.")}
    known = set(graph)
    # `from ranktop.wire import schema` names ranktop.wire.schema (a module) or ranktop.wire.X (a name in __init__).
    return {m: {n for n in deps if n in known and n != m} for m, deps in graph.items()}


def _a_circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep.startswith(node + "."):  # a package importing its own submodules in __init__ is no circle
                continue
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_module_imports_itself_through_others():
    """An import circle patched with a lazy or a type-only import is a layering fault, not a fix: none anywhere."""
    graph = _module_graph()
    assert len(graph) > 100 and "ranktop.wire.schema" in graph
    assert _a_circle(graph) is None, " -> ".join(_a_circle(graph))


def test_the_circle_check_finds_a_circle():
    assert _a_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _a_circle({"a": {"b"}, "b": set()}) is None
