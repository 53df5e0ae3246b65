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
