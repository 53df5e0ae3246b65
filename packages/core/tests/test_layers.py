"""Core's import graph: its layers point down ([tool.importlinter] in packages/core/pyproject.toml)
and it has no cycle, counting function-local and type-only imports (docs/architecture.md)."""

import sys
from pathlib import Path

import pytest

from trainkit.testing import subprocesses

grimp = pytest.importorskip("grimp", reason="import-linter is installed in core's nox session")

CORE = Path(__file__).resolve().parents[1]


def test_the_layer_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocesses.run([str(lint), "--no-logo", "--no-cache", "--config", str(CORE / "pyproject.toml")],
                           capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]


def test_core_has_no_import_cycle():
    graph = grimp.build_graph("trainkit", cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported != module and graph.chain_exists(imported, module):
                cycles.append([module, *graph.find_shortest_chain(imported, module)])
    assert not cycles, "import cycles in core:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_only_the_worker_group_calls_worker_actors():
    """As in Ray Train v2: the driver reaches its ranks through ``WorkerGroup`` (``call``,
    ``call_each``, ``execute``), the one place that can account for a rank's death."""
    source = CORE / "src" / "trainkit"
    callers = [f"{path.relative_to(source)}:{number}" for path in sorted(source.rglob("*.py"))
               if path.name != "worker_group.py"
               for number, line in enumerate(path.read_text().splitlines(), 1) if ".actor." in line and ".remote(" in line]
    assert not callers, f"worker actors called outside worker/worker_group.py: {callers}"


def test_the_contract_names_every_module():
    """A module the contract leaves out is checked by nothing: each has a place in a layer."""
    import tomllib

    contract = tomllib.loads((CORE / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    named = {part.strip() for layer in contract["layers"] for part in layer.replace("|", ":").split(":")}
    source = CORE / "src" / "trainkit"
    modules = {".".join(path.relative_to(source).with_suffix("").parts) for path in source.rglob("*.py")
               if path.name != "__init__.py"}
    left_out = sorted(m for m in modules if not any(m == n or m.startswith(n + ".") for n in named))  # (a package: all of it)
    assert not left_out, f"modules no layer of [tool.importlinter] names: {left_out}"
    packages = {".".join(path.relative_to(source).parent.parts) for path in source.rglob("__init__.py")}
    assert not sorted(named - modules - packages), f"layers name modules that do not exist: {sorted(named - modules - packages)}"
