"""RunConfig(worker_runtime_env=...): Ray Train V2's runtime_env for the workers (env_vars, working_dir, pip)."""

import os

import pytest

import trainkit
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig
from trainkit._internal.worker import runtime_env, spare


@pytest.mark.parametrize("env, message", [
    (5, "worker_runtime_env=5 is invalid: expected None or a dict"),
    ({"conda": "env.yaml"}, "unsupported key(s) 'conda': trainkit supports 'env_vars', 'working_dir', 'excludes', 'pip'"),
    ({"env_vars": {"A": 1}}, "worker_runtime_env['env_vars']={'A': 1} is invalid: expected a dict of str to str"),
    ({"env_vars": ["A=1"]}, "worker_runtime_env['env_vars']"),
    ({"working_dir": "/no/such/dir"}, "expected an existing local directory or a URI (no such directory)"),
    ({"working_dir": 3}, "worker_runtime_env['working_dir']=3 is invalid"),
    ({"excludes": "*.pyc"}, "worker_runtime_env['excludes']='*.pyc' is invalid: expected a list of str"),
    ({"pip": 3}, "worker_runtime_env['pip']=3 is invalid: expected a list of requirement strings"),
    ({"pip": "/no/requirements.txt"}, "the path of a requirements.txt that exists"),
    ({"pip": {"packages": ["x"], "extra": 1}}, "worker_runtime_env['pip']"),
    ({"pip": {"packages": ["x"], "pip_check": "no"}}, "worker_runtime_env['pip']"),
])
def test_a_bad_runtime_env_names_the_field(env, message):
    with pytest.raises(ValueError) as info:
        RunConfig(worker_runtime_env=env)
    assert message in str(info.value)


def test_a_good_runtime_env_is_kept_with_absolute_paths(tmp_path, monkeypatch):
    (tmp_path / "requirements.txt").write_text("emoji\n")
    monkeypatch.chdir(tmp_path)
    config = RunConfig(worker_runtime_env={"env_vars": {"A": "1"}, "working_dir": ".", "excludes": ["*.bin"],
                                           "pip": "requirements.txt"})
    assert config.worker_runtime_env == {"env_vars": {"A": "1"}, "working_dir": str(tmp_path),
                                         "excludes": ["*.bin"], "pip": str(tmp_path / "requirements.txt")}
    for pip in (["emoji==2.*"], {"packages": ["emoji"], "pip_check": False, "pip_version": "==24.0"}):
        assert RunConfig(worker_runtime_env={"pip": pip}).worker_runtime_env == {"pip": pip}
    assert RunConfig(worker_runtime_env={"working_dir": "s3://bucket/code.zip"}).worker_runtime_env \
        == {"working_dir": "s3://bucket/code.zip"}
    assert RunConfig().worker_runtime_env is None


def test_local_mode_refuses_a_runtime_env(run_config):
    with pytest.raises(ValueError, match=r"needs Ray workers: with ScalingConfig\(num_workers=0\)"):
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=0),
                            run_config=run_config(worker_runtime_env={"env_vars": {"A": "1"}})).fit()


def test_spares_serve_only_groups_with_their_runtime_env(monkeypatch):
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "1")  # CI's sessions turn spares off
    monkeypatch.setattr("trainkit._internal.cluster.ray_runtime.embedded_node", lambda: object())
    plain = spare.shape(2, {"CPU": 1}, ())
    with_env = spare.shape(2, {"CPU": 1}, (), runtime_env.key({"env_vars": {"A": "1"}}))
    assert plain != with_env and plain == spare.shape(2, {"CPU": 1}, (), runtime_env.key(None))


def env_and_module(config):
    import trainkit_test_runtime_env_mod  # only in the working_dir

    trainkit.report({"rank": trainkit.get_context().get_world_rank(),
                     "var": os.environ.get("TRAINKIT_TEST_RUNTIME_ENV_VAR"),
                     "module": trainkit_test_runtime_env_mod.VALUE})


def env_only(config):
    trainkit.report({"var": os.environ.get("TRAINKIT_TEST_RUNTIME_ENV_VAR")})


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def test_workers_get_env_vars_and_import_from_the_working_dir(ray_cluster, run_config, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "trainkit_test_runtime_env_mod.py").write_text("VALUE = 'from the working_dir'\n")
    two = ScalingConfig(num_workers=2)
    # a fit without a runtime_env first: its shutdown prestarts spare workers without one
    assert DataParallelTrainer(env_only, scaling_config=two, run_config=run_config()).fit().metrics == {"var": None}
    collect = Collect()
    DataParallelTrainer(env_and_module, scaling_config=two, run_config=run_config(
        callbacks=[collect], worker_runtime_env={"env_vars": {"TRAINKIT_TEST_RUNTIME_ENV_VAR": "set"},
                                                 "working_dir": str(code)})).fit()
    assert sorted(m["rank"] for m in collect.metrics) == [0, 1]
    assert all(m["var"] == "set" and m["module"] == "from the working_dir" for m in collect.metrics)
    # and the spares that fit left (started with its runtime_env) do not serve a fit without it
    assert DataParallelTrainer(env_only, scaling_config=two, run_config=run_config()).fit().metrics == {"var": None}
