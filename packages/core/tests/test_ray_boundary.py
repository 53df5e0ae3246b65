"""The one boundary with Ray's internals (cluster/ray_private.py reads them, cluster/ray_patches.py
patches them): nothing else in core touches them, no package bounds Ray from above, and a run works
on Ray's own code paths wherever a patch is off: the switch, a Ray release outside the tested ones,
a target that is not what a patch was written for."""

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

from trainkit.testing import subprocesses

CORE_SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = Path(__file__).resolve().parents[2]
BOUNDARY = {"trainkit/_internal/cluster/ray_private.py", "trainkit/_internal/cluster/ray_patches.py"}

# A 2-worker fit, twice under one name (the second resumes from the first's checkpoint), then what
# shows which patches the embedded cluster started with, and the lines logged at INFO and above.
SCRIPT = """
import json, logging, os, sys, tempfile
records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("trainkit").addHandler(handler)
logging.getLogger("trainkit").setLevel(logging.INFO)
import ray
if len(sys.argv) > 2:
    ray.__version__ = sys.argv[2]
import trainkit

def fn():
    resumed = trainkit.get_checkpoint() is not None
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "w"), "w").write("1")
        trainkit.report({"world": trainkit.get_context().get_world_size(), "resumed": resumed},
                        checkpoint=trainkit.Checkpoint.from_directory(tmp))

results = [trainkit.DataParallelTrainer(
    fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
    run_config=trainkit.RunConfig(name="boundary", storage_path=sys.argv[1], verbose=0)).fit().metrics
    for _ in range(2)]
import psutil
node = ray._private.worker._global_node
raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)

def command(process):
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""

import ray.util.serialization_addons as addons
seen = {
    "lean_node": "monitor" not in node.all_processes,
    "agent_stand_ins": any("ray_agent_stub" in command(c) for c in raylet.children()),
    "own_session": os.getsid(raylet.pid) != os.getsid(0),
    "fast_socket_retries": node._config.get("raylet_client_connect_timeout_milliseconds") == 20,
    "lazy_pydantic": getattr(addons.apply, "trainkit_lazy_pydantic", False),
    "quiet_worker_pool_warning": getattr(ray._private.worker.print_to_stdstream, "trainkit_filtered", False),
}
print(json.dumps({"results": results, "patched": sorted(k for k, v in seen.items() if v),
                  "address": node.node_ip_address, "gcs": node.gcs_address, "records": records}))
"""


def run_script(tmp_path, env=None, version=None) -> dict:
    out = subprocesses.run([sys.executable, "-c", SCRIPT, str(tmp_path), *([version] if version else [])],
                           env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    # (with a faked version, Ray's own processes may print a version mismatch after it)
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith('{"results"')))


def assert_ran_whole_on_loopback(seen: dict) -> None:
    assert seen["results"] == [{"world": 2, "resumed": False}, {"world": 2, "resumed": True}]
    assert seen["address"] == "127.0.0.1" and seen["gcs"].startswith("127.0.0.1:")


def test_the_patches_apply_on_a_tested_ray(tmp_path):
    from trainkit._internal.cluster import ray_patches

    if not ray_patches.tested_release():
        pytest.skip(f"Ray {ray_patches.ray_version()} is outside the tested releases")
    seen = run_script(tmp_path)
    assert_ran_whole_on_loopback(seen)
    expected = {"lean_node", "own_session", "fast_socket_retries", "lazy_pydantic", "quiet_worker_pool_warning"}
    if ray_patches.enabled("agent_stand_ins"):
        expected.add("agent_stand_ins")
    if os.environ.get(ray_patches.SWITCH) == "0":
        expected = set()
    assert set(seen["patched"]) == expected
    assert not [line for line in seen["records"] if "Ray's own code paths" in line]


def test_the_switch_turns_every_patch_off_and_a_fit_and_its_resume_still_work(tmp_path):
    seen = run_script(tmp_path, env={"TRAINKIT_RAY_PATCHES": "0"})
    assert_ran_whole_on_loopback(seen)  # loopback is a setting, not a patch: the switch keeps it
    assert seen["patched"] == []


def test_a_ray_outside_the_tested_releases_runs_on_its_own_code_paths_and_says_so_once(tmp_path):
    seen = run_script(tmp_path, env={"TRAINKIT_RAY_PATCHES": "1"}, version="99.0.0")  # (the switch on, as a user has it)
    assert_ran_whole_on_loopback(seen)
    assert seen["patched"] == []
    notes = [line for line in seen["records"] if "Ray 99.0.0 is outside the releases" in line]
    assert len(notes) == 1, seen["records"]


def test_launch_with_the_switch_off(tmp_path, monkeypatch):
    """``trainkit launch`` of a torchrun-style script, restarted once, on Ray's own code paths."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_launch import launch

    monkeypatch.setenv("TRAINKIT_RAY_PATCHES", "0")
    out = launch(tmp_path, "unpatched-launch", max_failures=1)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "(rank 0) hello from rank 0" in out.stdout
    state = json.loads((tmp_path / "runs" / "unpatched-launch" / "run_state.json").read_text())
    assert state["status"] == "finished" and len(state["failures"]) == 1


def test_a_patch_whose_target_changed_stays_off(monkeypatch, caplog):
    """A Ray whose function takes other parameters than the replacement relies on: not patched, a note."""
    import ray._private.services as services
    from trainkit._internal.cluster import ray_patches

    if not ray_patches.tested_release():
        pytest.skip("outside the tested releases every patch is off anyway")
    monkeypatch.delenv(ray_patches.SWITCH, raising=False)
    monkeypatch.setattr(services, "get_node", lambda node_id, gcs_address: None)  # parameters swapped
    monkeypatch.setattr(ray_patches, "_noted", set())
    with caplog.at_level("INFO", logger="trainkit"):
        assert not ray_patches.enabled("poll_raylet_registration")
        assert not ray_patches.enabled("poll_raylet_registration")
        assert ray_patches.apply({"poll_raylet_registration": lambda original: None}) == []
    assert services.get_node.__code__.co_varnames[:2] == ("node_id", "gcs_address")  # left as it was
    assert len([r for r in caplog.records if "poll_raylet_registration patch" in r.getMessage()]) == 1


def test_nothing_in_core_touches_ray_privates_outside_the_boundary():
    private = re.compile(r"ray\._private|ray\._raylet|from ray import _private|from ray import _raylet")
    found = sorted(str(path.relative_to(CORE_SRC)) for path in CORE_SRC.rglob("*.py")
                   if private.search(path.read_text()))
    assert set(found) <= BOUNDARY, f"Ray privates outside the boundary: {sorted(set(found) - BOUNDARY)}"


def test_no_package_bounds_ray_or_a_framework_from_above():
    """A lower bound only (as Lightning bounds torch): an upper one makes trainkit uninstallable
    beside the next release."""
    from packaging.requirements import Requirement

    bounded = []
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        extras = project.get("optional-dependencies", {}).values()
        for text in [*project.get("dependencies", []), *(dep for deps in extras for dep in deps)]:
            requirement = Requirement(text)
            if requirement.name.startswith("trainkit"):
                continue  # the monorepo's own distributions move in lockstep
            if any(spec.operator in ("<", "<=", "==", "~=", "===") for spec in requirement.specifier):
                bounded.append(f"{pyproject.parent.name}: {text}")
    assert not bounded, bounded
