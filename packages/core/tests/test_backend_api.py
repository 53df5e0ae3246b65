"""What a plugin author builds on: the public worker group (trainkit.backend.WorkerGroup), the
trainer with a default config, the registry's backend name, trainkit.validation and lazy_exports."""

import os
import sys
import types
from dataclasses import dataclass

import pytest
import trainkit
from trainkit import Backend, BackendConfig, DataParallelTrainer, ScalingConfig
from trainkit.lazy import lazy_exports
from trainkit.validation import check_int, check_positive

RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                   "NODE_RANK", "GROUP_WORLD_SIZE")
seen: dict[str, list] = {}  # what the backend saw in the driver


def _rank_and(value):
    return int(os.environ["TRAINKIT_RANK"]), value


def _env(*names):
    return {name: os.environ.get(name) for name in names}


class _AuthorBackend(Backend):  # written from docs/extending.md: the public interface only
    def on_start(self, worker_group, backend_config):
        ranks = worker_group.rendezvous()
        worker_group.set_env([{**r.env(), "AUTHOR_GREETING": f"hello {r.world_rank}"} for r in ranks])
        seen["per_rank"] = worker_group.execute_per_rank(_rank_and, [(f"arg {r.world_rank}",) for r in ranks])

    def on_shutdown(self, worker_group, backend_config):
        seen["at_shutdown"] = worker_group.execute(_env, "AUTHOR_GREETING")


@dataclass
class AuthorConfig(BackendConfig):
    @property
    def backend_cls(self):
        return _AuthorBackend


class AuthorTrainer(DataParallelTrainer):
    config_cls = AuthorConfig
    config_arg = "author_config"


def _report_env():
    trainkit.report(_env(*RENDEZVOUS_VARS, "AUTHOR_GREETING"))


class _Reports(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        seen["reports"] = metrics  # every rank's


def test_a_backend_on_the_public_worker_group_sets_per_rank_env_and_arguments(ray_cluster, run_config):
    AuthorTrainer(_report_env, scaling_config=ScalingConfig(num_workers=2),
                  run_config=run_config(callbacks=[_Reports()])).fit()
    assert seen["per_rank"] == [(0, "arg 0"), (1, "arg 1")]  # rank r got args_per_rank[r]
    assert seen["at_shutdown"] == [{"AUTHOR_GREETING": "hello 0"}, {"AUTHOR_GREETING": "hello 1"}]
    rank0, rank1 = seen["reports"]
    assert rank0["MASTER_ADDR"] == rank1["MASTER_ADDR"] == "127.0.0.1"  # one node: loopback
    assert rank0["MASTER_PORT"] == rank1["MASTER_PORT"] and int(rank0["MASTER_PORT"]) > 0
    for rank, env in enumerate((rank0, rank1)):
        assert {k: env[k] for k in RENDEZVOUS_VARS[2:] + ("AUTHOR_GREETING",)} == {
            "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": "0", "GROUP_WORLD_SIZE": "1", "AUTHOR_GREETING": f"hello {rank}"}


def test_set_env_is_undone_and_bad_input_is_refused(ray_cluster):
    from trainkit._internal.worker.worker_group import WorkerGroup

    group = WorkerGroup.start(ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}), 2,
                              run_name="env", attempt=0, storage=None, env={"AUTHOR_KEEP": "before"})
    try:
        group.set_env({"AUTHOR_KEEP": "during", "AUTHOR_NEW": "x"})
        assert group.execute(_env, "AUTHOR_KEEP", "AUTHOR_NEW") == [{"AUTHOR_KEEP": "during", "AUTHOR_NEW": "x"}] * 2
        group.restore_env()  # what shutdown does after on_shutdown
        assert group.execute(_env, "AUTHOR_KEEP", "AUTHOR_NEW") == [{"AUTHOR_KEEP": "before", "AUTHOR_NEW": None}] * 2
        with pytest.raises(TypeError, match=r"set_env: environment variables are str to str, got \{'PORT': 1\}"):
            group.set_env({"PORT": 1})
        with pytest.raises(ValueError, match="set_env got 1 mappings for 2 ranks"):
            group.set_env([{"PORT": "1"}])
        with pytest.raises(ValueError, match="execute_per_rank got 1 argument tuples for 2 ranks"):
            group.execute_per_rank(_rank_and, [("only one",)])
        assert [w.local_world_size for w in group.workers] == [2, 2]
    finally:
        group.shutdown(graceful=True)


def test_a_trainer_with_a_default_config():
    trainer = AuthorTrainer(_report_env)
    assert type(trainer.backend_config) is AuthorConfig
    given = AuthorConfig()
    assert AuthorTrainer(_report_env, author_config=given).backend_config is given
    with pytest.raises(TypeError, match="author_config must be an AuthorConfig, got BackendConfig"):
        AuthorTrainer(_report_env, author_config=BackendConfig())
    with pytest.raises(TypeError, match="AuthorTrainer takes author_config or backend_config, not both"):
        AuthorTrainer(_report_env, author_config=given, backend_config=AuthorConfig())
    with pytest.raises(TypeError, match="unexpected keyword argument 'autor_config'"):
        AuthorTrainer(_report_env, autor_config=given)
    with pytest.raises(TypeError, match="BadTrainer.config_arg must name its keyword argument, e.g. 'author_config'"):
        type("BadTrainer", (DataParallelTrainer,), {"config_cls": AuthorConfig})


def test_the_registry_names_the_config():
    from trainkit._internal.plugins import BackendRegistry

    @dataclass
    class PaddleConfig(BackendConfig):
        pass

    assert PaddleConfig().name == "paddle"  # unregistered: the class's name
    BackendRegistry().register("paddlepaddle", PaddleConfig)
    assert PaddleConfig().name == "paddlepaddle"


def test_validation_helpers_name_the_field_and_what_is_allowed():
    check_positive("timeout_s", 0.5)
    check_int("frequency", 0, 0)
    for bad in (0, -1, True, "30", None):
        with pytest.raises(ValueError, match=rf"timeout_s={bad!r} is invalid: expected a number > 0"):
            check_positive("timeout_s", bad)
    with pytest.raises(ValueError, match=r"frequency=-1 is invalid: expected an int >= 0 \(0: only at the end\)"):
        check_int("frequency", -1, 0, "0: only at the end")
    with pytest.raises(ValueError, match="every_n_epochs=1.5 is invalid: expected an int >= 1"):
        check_int("every_n_epochs", 1.5, 1)


def test_lazy_exports_import_on_first_use(monkeypatch):
    package = types.ModuleType("author_pkg")
    monkeypatch.setitem(sys.modules, "author_pkg", package)
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    package.__getattr__ = lazy_exports("author_pkg", {"rgb_to_hsv": "colorsys"})
    assert "colorsys" not in sys.modules
    from author_pkg import rgb_to_hsv

    assert rgb_to_hsv(1, 0, 0) == (0.0, 1.0, 1)
    assert package.__dict__["rgb_to_hsv"] is rgb_to_hsv  # kept: the next use is a plain attribute
    with pytest.raises(AttributeError, match="module 'author_pkg' has no attribute 'other'"):
        package.other


class _AbortBackend(Backend):
    def on_abort(self, worker_group, backend_config):  # the workers are still up: they answer
        seen.setdefault("aborted", []).append(worker_group.execute(_env, "TRAINKIT_RANK"))

    def on_shutdown(self, worker_group, backend_config):
        seen.setdefault("shut_down", []).append(len(worker_group))


@dataclass
class AbortConfig(BackendConfig):
    @property
    def backend_cls(self):
        return _AbortBackend


def _fail_in_the_first_attempt():
    if trainkit.get_context().get_attempt() == 0:
        raise RuntimeError("first attempt fails")


def test_on_abort_runs_before_a_failed_attempts_workers_are_killed_and_never_after_a_whole_one(ray_cluster, run_config):
    seen.pop("aborted", None), seen.pop("shut_down", None)
    DataParallelTrainer(_fail_in_the_first_attempt, backend_config=AbortConfig(),
                        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                        run_config=run_config(failure_config=trainkit.FailureConfig(max_failures=1))).fit()
    assert seen["aborted"] == [[{"TRAINKIT_RANK": "0"}, {"TRAINKIT_RANK": "1"}]]  # attempt 0 only
    assert seen["shut_down"] == [2]  # attempt 1 only


def _serve_on_held_socket(port):
    """Rank 0: the framework's server starts on the socket its worker bound for the rendezvous."""
    from trainkit.backend import take_listening_socket

    sock = take_listening_socket(port)
    held = sock is not None and sock.getsockname()[1] == port
    if sock is not None:
        sock.close()
    return held


class _ListeningBackend(Backend):
    def on_start(self, worker_group, backend_config):
        import errno
        import socket

        rank0 = worker_group.rendezvous(listen=True)[0]
        try:  # another process on the host trying the port in the window before the framework binds it
            socket.create_server((rank0.master_addr, rank0.master_port)).close()
            seen["taken_by_another"] = True
        except OSError as exc:
            seen["taken_by_another"] = exc.errno != errno.EADDRINUSE
        seen["served"] = worker_group.execute_single(0, _serve_on_held_socket, rank0.master_port)


@dataclass
class ListeningConfig(BackendConfig):
    @property
    def backend_cls(self):
        return _ListeningBackend


def test_a_rendezvous_port_is_bound_by_rank_0_before_anyone_hears_of_it(ray_cluster, run_config):
    """Issue 44 item 5: no port is picked free, released, and bound later (another process took it
    in between under load in CI: "Address already in use" binding rank 0's store)."""
    DataParallelTrainer(lambda: None, backend_config=ListeningConfig(), scaling_config=ScalingConfig(num_workers=2),
                        run_config=run_config()).fit()
    assert seen["taken_by_another"] is False and seen["served"] is True


def _serve_beside_the_hold(host, port):
    """A rank's framework binding its held port: a server with SO_REUSEADDR binds beside the hold;
    one without binds once ``release_port`` let go of it."""
    import socket

    from trainkit.backend import release_port

    with socket.create_server((host, port)) as server:
        with socket.create_connection((host, port)):
            accepted = server.accept()[0]
        accepted.close()  # after the client's end: TIME_WAIT stays on the client's side, not the port
    release_port(port)
    with socket.socket() as plain:
        plain.bind((host, port))
    return True


class _HoldingBackend(Backend):
    def on_start(self, worker_group, backend_config):
        import errno
        import socket

        offers = worker_group.free_ports(1, hold=True)
        seen["taken_by_another"] = []
        for host, (port,) in offers:  # another process on the host binding a port before the framework does
            try:
                with socket.socket() as sock:
                    sock.bind((host, port))
                seen["taken_by_another"].append(True)
            except OSError as exc:
                seen["taken_by_another"].append(exc.errno != errno.EADDRINUSE)
        seen["served"] = worker_group.execute_per_rank(_serve_beside_the_hold, [(h, p) for h, (p,) in offers])


@dataclass
class HoldingConfig(BackendConfig):
    @property
    def backend_cls(self):
        return _HoldingBackend


def test_a_held_port_stays_the_ranks_until_its_framework_binds_it(ray_cluster, run_config):
    """Issue 44 item 5, for frameworks that bind a named port themselves (JAX's coordinator,
    TF_CONFIG, LightGBM): ``free_ports(hold=True)`` keeps each port bound in its rank's worker."""
    DataParallelTrainer(lambda: None, backend_config=HoldingConfig(), scaling_config=ScalingConfig(num_workers=2),
                        run_config=run_config()).fit()
    assert seen["taken_by_another"] == [False, False] and seen["served"] == [True, True]


def test_a_config_setting_the_deprecated_follow_thread_count_still_forks_and_follows(monkeypatch):
    """The fork contract replaced ``follow_thread_count``: a plugin written before it warns once, is
    fork-safe, and its function is called from the default ``after_fork`` with both thread counts."""
    import warnings
    from dataclasses import dataclass
    from typing import ClassVar

    from trainkit import BackendConfig

    calls = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @dataclass
        class OldConfig(BackendConfig):
            follow_thread_count: ClassVar = staticmethod(lambda loaded, wanted: calls.append((loaded, wanted)))

    assert [w.category for w in caught] == [DeprecationWarning]
    assert "fork_safe = True" in str(caught[0].message) and "after_fork" in str(caught[0].message)
    assert OldConfig.fork_safe and not BackendConfig.fork_safe
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    OldConfig.after_fork({"OMP_NUM_THREADS": "1"})
    OldConfig.after_fork({"OMP_NUM_THREADS": "2"})  # unchanged: nothing to follow
    assert calls == [(1, 2)]
