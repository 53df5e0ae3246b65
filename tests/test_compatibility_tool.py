"""tools/compatibility.py --latest: pip's index answer read, pip's constraints applied, the extra rows
built and handed to the noxfile (TRAINKIT_EXTRA_ROWS), results reported and written to the page. No
network: the index's answers are a function given to find_newer."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("trainkit_compatibility", ROOT / "tools" / "compatibility.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


PIP_INDEX_OUTPUT = """\
WARNING: pip index is currently an experimental command. It may be removed/changed in a future release without prior warning.
torch (2.16.0rc1)
Available versions: 2.16.0rc1, 2.15.0, 2.15.0.dev20261101, 2.14.1, 2.13.0+cpu, 2.13.0, 1.7.0.post0
  INSTALLED: 2.13.0+cpu
  LATEST:    2.16.0rc1
"""


def test_pip_index_versions_output_gives_stable_public_releases_newest_first(tool):
    assert tool.parse_index_versions(PIP_INDEX_OUTPUT) == [Version(v) for v in
                                                            ("2.15.0", "2.14.1", "2.13.0", "1.7.0.post0")]
    assert tool.parse_index_versions("ERROR: No matching distribution found for nothing") == []


def test_constraints_come_from_pip_constraint_else_install_else_global(tool):
    listing = "global.constraint='/etc/a.txt'\ninstall.constraint='/etc/b.txt /etc/c.txt'\nglobal.cert='/x'"
    assert tool.constraint_files(listing) == ["/etc/b.txt", "/etc/c.txt"]
    assert tool.constraint_files(listing + "\n:env:.constraint='/tmp/d.txt'") == ["/tmp/d.txt"]
    assert tool.constraint_files("global.constraint='/etc/a.txt'") == ["/etc/a.txt"]
    assert tool.constraint_files("global.cert='/x'") == []


def test_pip_constraint_caps_a_release(tool, tmp_path, monkeypatch):
    (tmp_path / "more.txt").write_text("jax<0.12  # the CPU wheels on disk\n")
    caps = tmp_path / "constraints.txt"
    caps.write_text("# these lie on disk\ntorch<=2.14.1\nnumpy<2 ; python_version < '3.10'\n-c more.txt\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(caps))
    files = tool.constraint_files()  # a real `pip config list`: it shows the environment's setting
    assert files == [str(caps)]
    constraints = tool.read_constraints(files)
    assert tool.cap("torch", "2.15.0", "3.11", constraints) == f"capped here (constraint torch<=2.14.1 in {caps})"
    assert tool.cap("Torch", "2.14.1", "3.11", constraints) is None
    assert tool.cap("numpy", "2.4.1", "3.11", constraints) is None  # its marker leaves 3.11 out
    assert "numpy<2" in tool.cap("numpy", "2.4.1", "3.9", constraints)
    assert "jax<0.12" in tool.cap("jax", "0.12.0", "3.12", constraints)  # through -c


INDEX = {  # (distribution, Python): what the index offers
    ("torch", "3.11"): ["2.15.0", "2.14.1", "2.13.0"],
    ("ray", "3.11"): ["2.61.0", "2.60.0"],
    ("jax", "3.11"): ["0.10.2"],
    ("jax", "3.12"): ["0.12.0.1", "0.12.0", "0.11.2", "0.10.2"],
    ("jaxlib", "3.12"): ["0.12.0", "0.11.2", "0.10.2"],
    ("transformers", "3.11"): ["5.25.0", "5.24.0"],
    ("lightgbm", "3.11"): ["4.7.0"],
}


def fake_index(distribution, python):
    return [Version(v) for v in INDEX.get((distribution, python), [])]


def test_newer_releases_become_rows_of_the_newest_row_or_are_capped(tool, tmp_path):
    caps = tmp_path / "constraints.txt"
    caps.write_text("torch<=2.14.1\n")
    packages = [ROOT / "packages" / name for name in ("core", "torch", "jax", "hf", "lightgbm")]
    newer, up_to_date = tool.find_newer(packages, versions=fake_index, pythons=["3.10", "3.11", "3.12", "3.13"],
                                        constraints=tool.read_constraints([str(caps)]))
    found = {(item.distribution, item.version): item for item in newer}
    assert sorted(found) == [("jax", "0.11.2"), ("jax", "0.12.0"), ("jax", "0.12.0.1"), ("ray", "2.61.0"),
                             ("torch", "2.15.0"), ("transformers", "5.25.0")]
    torch = found[("torch", "2.15.0")]
    assert torch.status == f"capped here (constraint torch<=2.14.1 in {caps})" and not torch.runnable
    assert torch.newest == "2.14.1" and torch.session == "torch(torch=2.15.0, python=3.11)"
    assert found[("ray", "2.61.0")].status == "run" and found[("ray", "2.61.0")].runnable  # Ray: a lower bound only
    # only Python 3.12 offers them; jaxlib moves with jax, to its own release of that major.minor
    assert found[("jax", "0.12.0.1")].row == {"python": "3.12", "jax": "0.12.0.1", "jaxlib": "0.12.0"}
    assert found[("jax", "0.11.2")].runnable
    # of a major.minor series only the newest runs (all with every=True)
    assert found[("jax", "0.12.0")].status == "not run: 0.12.0.1 is newer in 0.12 (--all runs it)"
    # the CI row is the base, its other pins (torch 2.13.0 the package depends on only through trainkit-torch) kept
    hf = found[("transformers", "5.25.0")]
    assert hf.runnable and hf.session == ("hf(transformers=5.25.0, accelerate=1.15.0, deepspeed=0.19.8, "
                                          "datasets=5.2.0, torch=2.13.0, python=3.11)")
    assert "lightgbm 4.7.0 (lightgbm)" in up_to_date and "accelerate 1.15.0 (hf)" in up_to_date

    # results from nox's report: a failed runnable release fails the run; capped ones do not
    tool.set_results(newer, {"sessions": [{"name": hf.session, "result": "success"},
                                          {"name": found[("ray", "2.61.0")].session, "result": "success"},
                                          {"name": found[("jax", "0.11.2")].session, "result": "failed"},
                                          {"name": found[("jax", "0.12.0.1")].session, "result": "skipped"}]})
    assert hf.result == "pass" and found[("jax", "0.12.0")].result == ""
    assert [(item.version, item.result) for item in tool.failed(newer)] == [("0.11.2", "fail"), ("0.12.0.1", "skipped")]
    tool.set_results(newer, {"sessions": []})  # nox ended before its report named them
    assert {item.result for item in tool.failed(newer)} == {"not run"} and len(tool.failed(newer)) == 4
    every, _ = tool.find_newer([ROOT / "packages" / "jax"], versions=fake_index, pythons=["3.11", "3.12"],
                               constraints={}, every=True)
    assert [item.version for item in every if item.runnable] == ["0.11.2", "0.12.0", "0.12.0.1"]


def test_a_companion_without_a_release_leaves_the_row_unrun(tool):
    index = {**INDEX, ("jaxlib", "3.12"): ["0.10.2"]}
    newer, _ = tool.find_newer([ROOT / "packages" / "jax"], versions=lambda d, p: [Version(v) for v in
                                                                                    index.get((d, p), [])],
                               pythons=["3.11", "3.12"], constraints={})
    assert {item.status for item in newer} == {f"no jaxlib release for {v} on the index"
                                               for v in ("0.11.2", "0.12.0", "0.12.0.1")}


def test_write_puts_the_section_before_the_notes_and_replaces_it_next_time(tool, tmp_path):
    page = tmp_path / "compatibility.md"
    page.write_text("# Compatibility\n\n| package |\n| --- |\n| core |\n\n## Notes\n\n- a note\n")
    item = tool.Newer("torch", "torch", "2.15.0", "2.14.1", {"python": "3.11", "torch": "2.15.0"},
                      "capped here (constraint torch<=2.14.1 in /etc/c.txt)")
    tool.write_latest(tool.latest_section([item], ["xgboost 3.4.1 (xgboost)"], dry_run=True), page)
    first = page.read_text()
    assert first.startswith("# Compatibility\n\n| package |\n| --- |\n| core |\n\n## Newer releases\n")
    assert first.endswith("## Notes\n\n- a note\n")
    assert ("| torch | torch 2.15.0 | 2.14.1 | `torch(torch=2.15.0, python=3.11)` | capped here (constraint "
            "torch<=2.14.1 in /etc/c.txt) |") in first
    assert "No newer release: xgboost 3.4.1 (xgboost)." in first and "A dry run" in first
    tool.write_latest(tool.latest_section([], [], dry_run=False), page)
    second = page.read_text()
    assert second.count("## Newer releases") == 1 and "No newer release." in second and "torch 2.15.0" not in second
    assert second.endswith("## Notes\n\n- a note\n")
    # the full matrix's rewrite keeps both sections below its table
    assert tool.notes(page).startswith("\n## Newer releases") and tool.notes(page).endswith("- a note\n")


def test_the_noxfile_lists_extra_rows_tagged_latest_only(tool):
    if importlib.util.find_spec("nox") is None:
        pytest.skip("nox is not installed")
    row = {"python": "3.11", "torch": "2.15.0"}
    env = {**os.environ, "TRAINKIT_EXTRA_ROWS": json.dumps({"torch": [row]})}
    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-t", "latest"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=240)
    assert listed.returncode == 0, listed.stderr
    sessions = json.loads(listed.stdout)
    assert [(s["name"], s["tags"]) for s in sessions] == [(tool.session_name("torch", row), ["torch", "latest"])]
    # not in the matrix (nor in a plain `nox`)
    matrix = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-t", "matrix"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=240)
    assert tool.session_name("torch", row) not in {s["name"] for s in json.loads(matrix.stdout)}
    wrong = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=ROOT, capture_output=True, text=True,
                           env={**env, "TRAINKIT_EXTRA_ROWS": json.dumps({"pytorch": [row]})}, timeout=240)
    assert wrong.returncode != 0 and "TRAINKIT_EXTRA_ROWS names no package ['pytorch']" in wrong.stdout + wrong.stderr


def test_a_release_a_package_bounds_out_is_capped_by_the_package(tool, tmp_path):
    """A package whose pyproject bounds its framework from above (ours do not: test_ray_boundary)."""
    capped = tmp_path / "core"
    capped.mkdir()
    (capped / "pyproject.toml").write_text((ROOT / "packages" / "core" / "pyproject.toml").read_text()
                                           .replace('"ray>=2.40",', '"ray>=2.40,<2.61",'))
    newer, _ = tool.find_newer([capped], versions=fake_index, pythons=["3.11"], constraints=[])
    [ray] = [item for item in newer if item.distribution == "ray"]
    assert ray.status.startswith("capped by the package (ray") and not ray.runnable
