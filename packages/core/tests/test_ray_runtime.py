"""The embedded cluster: its stand-ins for Ray's agents and the other patches of Ray internals
(test_ray_boundary.py: the switch, untested releases), its priority, token and environment."""

import os
import subprocess
import sys

import pytest

import trainkit
from trainkit.testing import subprocesses

def test_use_gpu_without_a_gpu_fails_at_once_saying_so(ray_cluster, run_config):
    import pytest
    import trainkit
    from trainkit import DataParallelTrainer, ScalingConfig

    if ray_cluster.cluster_resources().get("GPU"):
        pytest.skip("this machine has a GPU")
    # the up-front check's error (a PlacementError says "could not place ... within 60 s")
    with pytest.raises(ValueError, match=r"GPU=1 \(the machine has 0\).*use_gpu=True needs a GPU"):
        DataParallelTrainer(lambda: trainkit.report({"x": 1}), scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
                            run_config=run_config()).fit()


@pytest.mark.ray_patches
def test_the_embedded_raylet_runs_agent_stubs_and_runtime_env_still_works(ray_cluster):
    """No dashboard agent; the runtime env agent only once a task has a runtime_env."""
    import psutil
    import pytest

    if not hasattr(ray_cluster._raylet, "wait_for_persisted_port"):
        pytest.skip("this Ray release's agents do not report their ports in files: no stand-ins")

    node = ray_cluster._private.worker._global_node
    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    children = {child.pid: " ".join(child.cmdline()) for child in raylet.children()}
    agents = {pid: cmd for pid, cmd in children.items() if "ray_agent_stub.py" in cmd}
    assert len(agents) == 2, children
    ray_agents = [cmd for cmd in children.values() if "ray_agent_stub.py" not in cmd
                  and ("dashboard/agent.py" in cmd or "runtime_env/agent/main.py" in cmd)]
    assert not ray_agents, children
    waiting = next(pid for pid, cmd in agents.items() if "--on-first-use" in cmd)

    @ray_cluster.remote
    def probe():
        return os.environ.get("TRAINKIT_PROBE")

    assert ray_cluster.get(probe.options(runtime_env={"env_vars": {"TRAINKIT_PROBE": "set"}}).remote(), timeout=60) == "set"
    assert "ray_agent_stub.py" not in " ".join(psutil.Process(waiting).cmdline())  # it became the real agent


@pytest.mark.ray_patches
def test_the_agent_stub_exits_once_its_raylet_is_gone(processes):
    """A raylet killed outright (SIGKILL) never stops its agents: the stub must not outlive it."""
    import time

    import psutil
    from trainkit._internal.cluster import ray_runtime

    stub = os.path.join(os.path.dirname(ray_runtime.__file__), "ray_agent_stub.py")
    script = ("import subprocess, sys, time\n"
              f"print(subprocess.Popen([sys.executable, '-S', {stub!r}]).pid, flush=True)\n"
              "time.sleep(60)")
    raylet = processes.start([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(raylet.stdout.readline())
    time.sleep(0.5)
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # waits while its raylet lives
    raylet.kill()
    raylet.wait()
    deadline = time.monotonic() + 60  # a guard; the stub polls its raylet every 0.5 s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the agent stub (pid {pid}) outlived its raylet by 60 s")


@pytest.mark.ray_patches
def test_the_embedded_raylet_retries_its_store_socket_in_20_ms(ray_cluster):
    """Ray's 1 s retry, when the raylet's object store socket is not there yet, added 1 s to some starts."""
    config = ray_cluster._private.worker._global_node._config
    assert config["raylet_client_connect_timeout_milliseconds"] == 20
    assert config["raylet_client_connect_timeout_milliseconds"] * config["raylet_client_num_connect_attempts"] >= 10_000


@pytest.mark.ray_patches
def test_embedded_workers_import_pydantic_only_when_used(ray_cluster):
    """Ray imports pydantic (0.2-0.3 s) in every process for one serializer; the embedded cluster's
    workers start from ray_worker_main, which skips that until pydantic is imported."""
    import pytest

    pydantic = pytest.importorskip("pydantic")

    @ray_cluster.remote
    def imported(_argument) -> bool:  # an argument: its deserialization sets up the worker's serializers
        import sys

        return "pydantic" in sys.modules

    class Point(pydantic.BaseModel):
        x: int

    @ray_cluster.remote
    def shifted(point: Point) -> Point:
        return Point(x=point.x + 1)

    assert ray_cluster.get(imported.remote([1]), timeout=60) is False
    assert ray_cluster.get(shifted.remote(Point(x=1)), timeout=60) == Point(x=2)


def report_priority():
    child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True)
    trainkit.report({"nice": os.nice(0), "child_nice": int(child.stdout)})


def test_the_embedded_clusters_workers_run_at_the_drivers_priority(ray_cluster, run_config):
    """Ray starts its workers at nice 15, so a rank lost to any busy process sharing its CPU cgroup
    (no autogroup: containers, pods, services). The ranks, and the processes they start (a launched
    script, data loaders), run at the driver's priority, as torchrun's do."""
    result = trainkit.DataParallelTrainer(report_priority, scaling_config=trainkit.ScalingConfig(num_workers=1),
                                          run_config=run_config()).fit()
    assert result.metrics == {"nice": os.nice(0), "child_nice": os.nice(0)}


def test_drivers_starting_at_once_share_one_whole_private_token(tmp_path):
    """Six first drivers on a machine make Ray's token at the same moment: each reads the same
    non-empty token right after, and the file is 0600."""
    race = ("import os, sys, time\n"
            "from trainkit._internal.cluster import ray_runtime\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.001)\n"
            "ray_runtime._private_auth_token()\n"
            "print(open(os.path.expanduser('~/.ray/auth_token')).read())\n")
    go = tmp_path / "go"
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RAY_AUTH_TOKEN", None)
    racers = [subprocesses.start([sys.executable, "-c", race, str(go)], env=env, stdout=subprocess.PIPE, text=True)
              for _ in range(6)]
    go.touch()
    tokens = {racer.communicate(timeout=120)[0].strip() for racer in racers}
    assert len(tokens) == 1 and "" not in tokens, tokens
    assert (tmp_path / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in (tmp_path / ".ray").iterdir()] == ["auth_token"]  # no partial file left


def test_the_embedded_cluster_leaves_the_drivers_environment_as_it_was(ray_cluster):
    """Ray's single-machine switch reaches the embedded cluster's processes only: a ``ray start`` the
    driver runs later (a node of a real cluster) inherits nothing of it and may join a cluster."""
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
    assert ray_cluster._private.ray_constants.ENABLE_RAY_CLUSTER  # Linux: multi-node clusters allowed

    @ray_cluster.remote
    def worker_environment():
        return os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")

    assert ray_cluster.get(worker_environment.remote()) == "0"  # the cluster's own processes keep it


PORT_THIEF = """
import glob, os, socket, threading, time
import ray
from trainkit._internal.cluster.ray_runtime import ensure_ray

ensure_ray(num_cpus=1)
node = ray._private.worker._global_node
[port_file] = glob.glob(os.path.join(node.get_session_dir_path(), "runtime_env_agent_port_*"))
port = int(open(port_file).read())
stolen, stop = [], threading.Event()

def thief():  # binds the agent's port the moment nothing holds it (as any process's bind or connection may)
    while not stop.is_set():
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            stolen.append(sock)
            return
        except OSError:
            sock.close()

threading.Thread(target=thief, daemon=True).start()

@ray.remote
def probe():
    return os.environ.get("TRAINKIT_PROBE")

try:
    print("probe:", ray.get(probe.options(runtime_env={"env_vars": {"TRAINKIT_PROBE": "set"}}).remote(), timeout=90))
except Exception as exc:
    print("probe failed:", type(exc).__name__)
stop.set()
print("stolen:", bool(stolen))
"""


@pytest.mark.ray_patches
def test_the_runtime_env_agents_port_is_never_free_while_it_starts(tmp_path):
    """The stand-in hands its port to the real agent through an exec and the agent's imports; a
    process binding that port meanwhile would leave the agent without it, and the raylet, which
    fate-shares with its agent, would exit. Here a thread tries to bind the port all along."""
    import pytest

    import ray

    if not hasattr(ray._raylet, "wait_for_persisted_port"):
        pytest.skip("this Ray release's agents do not report their ports in files: no stand-ins")
    out = subprocesses.run([sys.executable, "-c", PORT_THIEF], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-3:-1] == ["probe: set", "stolen: False"], out.stdout + out.stderr[-3000:]
