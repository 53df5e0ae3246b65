"""The embedded cluster's workers start forked from one process that imported the framework once
(``ray_runtime.start_fork_server``, ``ray_worker_main.py``): fresh processes each fit, the user's
edits seen, thread pools sized as Ray sizes a fresh worker's, and a fresh start where none serves."""

import json
import os
import signal
import subprocess
import sys
import time
import textwrap

import pytest

from trainkit._internal.cluster.userdir import private_dir
from trainkit.testing import subprocesses

pytestmark = pytest.mark.ray_patches  # forked workers need Ray's worker entry point patched

FRAMEWORK = '''
import os
from dataclasses import dataclass
from typing import ClassVar
from trainkit import BackendConfig

LOADED_IN = os.getpid()  # the process that imported this "framework"


@dataclass
class ForkConfig(BackendConfig):
    prewarm_modules: ClassVar = ("fork_framework",)
    fork_safe: ClassVar = True

    @classmethod
    def after_fork(cls, loaded_env):
        loaded, now = loaded_env.get("OMP_NUM_THREADS", ""), os.environ.get("OMP_NUM_THREADS", "")
        if loaded.isdigit() and now.isdigit() and loaded != now:  # (as torch's follows Ray's value)
            os.environ["FOLLOWED"] = f"{loaded}->{now}"
'''

DRIVER = '''
import json, os, signal, sys
import trainkit
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig
from trainkit._internal.cluster import ray_runtime
from fork_framework import ForkConfig

OUT = sys.argv[1]


def fn(config):
    import fork_framework, user_code

    rank = trainkit.get_context().get_world_rank()
    with open(os.path.join(OUT, f"{config['fit']}-{rank}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "loaded_in": fork_framework.LOADED_IN,
                   "version": user_code.VERSION, "followed": os.environ.get("FOLLOWED"),
                   "omp": os.environ.get("OMP_NUM_THREADS")}, f)


def fit(name, workers, cpus):
    result = DataParallelTrainer(fn, backend_config=ForkConfig(), train_loop_config={"fit": name},
                                 scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": cpus}),
                                 run_config=RunConfig(name=name, storage_path=OUT, verbose=0)).fit()
    assert result.error is None, result.error


fit("first", 2, 1)
with open("user_code.py", "w") as f:
    f.write("VERSION = 2\\n")  # an edit between two fits of one driver
fit("edited", 1, 2)
server = ray_runtime._fork_server
print("SERVER", server.pid, flush=True)
server.kill()
server.wait()
fit("no_server", 2, 1)
'''


def test_workers_fork_from_one_process_that_imported_the_framework(tmp_path):
    (tmp_path / "fork_framework.py").write_text(FRAMEWORK)
    (tmp_path / "user_code.py").write_text("VERSION = 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "PYTHONDONTWRITEBYTECODE": "1", "TRAINKIT_SPARE_WORKERS": "0"}  # (a fit's workers start with it)
    env.pop("OMP_NUM_THREADS", None)  # Ray's per-actor value then, which a forked worker follows
    left = private_dir() / "workers-99999999.sock"  # a driver's that was killed (no such pid)
    left.touch()
    out = subprocesses.run([sys.executable, "-c", textwrap.dedent(DRIVER), str(tmp_path)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert not left.exists()  # swept as the driver started its own
    server = int(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("SERVER")))
    ranks = {path.stem: json.loads(path.read_text()) for path in tmp_path.glob("*-*.json")}
    first, edited, no_server = ([ranks[f"{fit}-{r}"] for r in range(n)] for fit, n in
                                (("first", 2), ("edited", 1), ("no_server", 2)))
    for rank in first + edited:  # forked from the server, the framework imported there, not here
        assert rank["ppid"] == server and rank["loaded_in"] == server, rank
    assert len({rank["pid"] for rank in first + edited + no_server}) == 5  # a fresh process each
    assert [rank["version"] for rank in first + edited] == [1, 1, 2]  # the user's code imported by the worker
    # Ray's OMP_NUM_THREADS (the worker's CPUs); the framework loaded with 1 follows it where it differs
    assert [(rank["omp"], rank["followed"]) for rank in first + edited] == [("1", None), ("1", None), ("2", "1->2")]
    for rank in no_server:  # the server gone: each worker starts as a fresh process, imports of its own
        assert rank["ppid"] != server and rank["loaded_in"] == rank["pid"], rank


OUTLIVE = '''
import os, sys, time
import trainkit
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig
from fork_framework import ForkConfig

OUT = sys.argv[1]


def fn():
    rank = trainkit.get_context().get_world_rank()
    open(os.path.join(OUT, f"training-{rank}"), "w").write(str(os.getppid()))
    while not os.path.exists(os.path.join(OUT, "go")):
        time.sleep(0.05)
    trainkit.report({"pid": os.getpid()})


trainer = DataParallelTrainer(fn, backend_config=ForkConfig(), scaling_config=ScalingConfig(num_workers=2),
                              run_config=RunConfig(name="outlive", storage_path=OUT, verbose=0))
result = trainer.fit()
print("ERROR", result.error, flush=True)
'''


def test_neither_the_fork_server_dying_nor_a_stop_signal_to_the_stand_ins_ends_a_worker(tmp_path):
    """The workers are Ray's: the fork server dying (killed, OOM) mid-run ends none of them, and
    neither does a SIGTERM to the processes Ray started for them (a signal to every process of the
    machine reaches the worker itself)."""
    import psutil

    (tmp_path / "fork_framework.py").write_text(FRAMEWORK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    driver = subprocesses.start([sys.executable, "-c", textwrap.dedent(OUTLIVE), str(tmp_path)], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not all((tmp_path / f"training-{rank}").read_text() if (tmp_path / f"training-{rank}").exists()
                      else "" for rank in range(2)):
            assert driver.poll() is None, driver.stderr.read()[-3000:]
            time.sleep(0.05)
        [server] = {int((tmp_path / f"training-{rank}").read_text()) for rank in range(2)}  # their parent
        assert "forkserver" in open(f"/proc/{server}/cmdline").read()
        stand_ins = [p for p in psutil.Process(driver.pid).children(recursive=True)
                     if p.cmdline()[1:2] and p.cmdline()[1].endswith("ray_worker_main.py")]
        assert len(stand_ins) >= 2
        for stand_in in stand_ins:
            stand_in.send_signal(signal.SIGTERM)
        os.kill(server, signal.SIGKILL)
        time.sleep(1.0)  # (a worker dying with it would be seen by Ray within this)
        (tmp_path / "go").touch()
        out, err = driver.communicate(timeout=120)
    finally:
        subprocesses.end(driver)
    assert driver.returncode == 0 and "ERROR None" in out, out[-2000:] + err[-3000:]


KILLED = '''
import os, signal, sys, tempfile, time
import trainkit
from trainkit import Checkpoint, DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig
from trainkit._internal.cluster import ray_runtime
from fork_framework import ForkConfig

OUT = sys.argv[1]


def fn():
    context = trainkit.get_context()
    start = 0
    if (checkpoint := trainkit.get_checkpoint()) is not None:
        with checkpoint.as_directory() as directory:
            start = int(open(os.path.join(directory, "step")).read())
    for step in range(start + 1, 4):
        with tempfile.TemporaryDirectory() as directory:
            open(os.path.join(directory, "step"), "w").write(str(step))
            trainkit.report({"step": step, "resumed_from": start, "ppid": os.getppid()},
                            checkpoint=Checkpoint.from_directory(directory))
        if step == 2 and start == 0:  # at once after report() returned on every rank
            done = os.path.join(OUT, "reported")
            if context.get_world_rank() == 0:
                open(done, "w").close()
            else:
                while not os.path.exists(done):
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGKILL)


result = DataParallelTrainer(fn, backend_config=ForkConfig(), scaling_config=ScalingConfig(num_workers=2),
                             run_config=RunConfig(name="killed", storage_path=OUT, verbose=0,
                                                  failure_config=FailureConfig(max_failures=1))).fit()
print("RESULT", result.error, result.metrics["step"], result.metrics["resumed_from"],
      result.metrics["ppid"] == ray_runtime._fork_server.pid, flush=True)
'''


def test_a_forked_rank_killed_at_once_after_report_resumes_from_that_checkpoint(tmp_path):
    """A forked worker dies as a fresh one does: SIGKILLed at once after a report() returned on every
    rank, the run's retry resumes from that report's checkpoint (the stand-in follows its worker)."""
    (tmp_path / "fork_framework.py").write_text(FRAMEWORK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocesses.run([sys.executable, "-c", textwrap.dedent(KILLED), str(tmp_path)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "RESULT None 3 2 True" in out.stdout, out.stdout[-2000:]  # the retry's workers forked too


AHEAD = '''
import os, sys, threading
import psutil
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig
from trainkit._internal.cluster import ray_runtime
from fork_framework import ForkConfig

OUT = sys.argv[1]


def servers():
    """This driver's fork servers (its child processes running forkserver.py)."""
    found = []
    for child in psutil.Process().children():
        try:
            if "trainkit._internal.cluster.forkserver" in child.cmdline():
                found.append(child.pid)
        except psutil.Error:  # ended meanwhile
            pass
    return found


class FirstRayImport:  # what ran when this process first imported Ray
    def find_spec(self, name, path=None, target=None):
        if name == "ray":
            sys.meta_path.remove(self)
            print("AT_RAY_IMPORT", len(servers()), flush=True)


sys.meta_path.insert(0, FirstRayImport())
lock = threading.Lock()


def unpicklable(config):
    lock.acquire()


def fn(config):
    import trainkit
    trainkit.report({"ppid": os.getppid()})


def fit(train_fn, name):
    return DataParallelTrainer(train_fn, backend_config=ForkConfig(), scaling_config=ScalingConfig(num_workers=2),
                               run_config=RunConfig(name=name, storage_path=OUT, verbose=0)).fit()


try:
    fit(unpicklable, "refused")
except TypeError as exc:
    print("REFUSED", "cannot be sent to workers" in str(exc), servers(), flush=True)
result = fit(fn, "ran")
print("RAN", result.metrics["ppid"] == ray_runtime._fork_server.pid, servers() == [ray_runtime._fork_server.pid],
      flush=True)
'''


def test_the_fork_server_starts_before_the_driver_imports_ray_and_a_refused_fit_stops_it(tmp_path):
    """The embedded cluster's fork server starts as fit() begins, so its framework import (the start's
    longest step) overlaps the driver's own import of Ray and checks of the run; the fit's Ray start
    takes that server (one server, the workers' parent); a fit refused before Ray starts (an
    unpicklable training function) leaves no server behind."""
    (tmp_path / "fork_framework.py").write_text(FRAMEWORK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "TRAINKIT_WARM": "0"}
    out = subprocesses.run([sys.executable, "-c", textwrap.dedent(AHEAD), str(tmp_path)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    lines = [line for line in out.stdout.splitlines() if line.split()[:1] in (["AT_RAY_IMPORT"], ["REFUSED"], ["RAN"])]
    assert lines == ["AT_RAY_IMPORT 1", "REFUSED True []", "RAN True True"], out.stdout[-2000:]


def test_the_stand_in_exits_as_its_worker_did_a_sigkill_too():
    """The process Ray started for a forked worker ends as the worker did, SIGKILLed (the OOM killer,
    its fork server killed) included: setting SIGKILL's disposition first failed (exit 1, a traceback)."""
    for code in (-signal.SIGKILL, -signal.SIGTERM, 3, 0):
        done = subprocess.run([sys.executable, "-c", "from trainkit._internal.cluster.ray_worker_main import exit_as; "
                               f"exit_as({code})"], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stderr) == (code, ""), (code, done.stderr[-2000:])
