"""`trainkit launch`'s command line is torchrun's: every torchrun flag, in both spellings, parsed as
torchrun parses it (PET_* defaults included). Parsing and planning only: nothing starts Ray."""

import argparse
import os
import sys

import pytest

from trainkit import cli
from trainkit._internal import display
from trainkit._internal.tools import launch, launch_command
from trainkit._internal.tools.launch_command import UsageError


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("PET_") or name in ("SLURM_NODEID", "RAY_ADDRESS"):
            monkeypatch.delenv(name)
    (tmp_path / "train.py").write_text("")
    return str(tmp_path / "train.py")


def parse(*argv):
    parser = argparse.ArgumentParser()
    launch_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def plan(*argv):
    return launch_command.plan(parse(*argv))


def test_every_multi_word_flag_has_both_spellings(script):
    for flag in ("--nproc-per-node", "--node-rank", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf",
                 "--max-restarts", "--monitor-interval", "--start-method", "--event-log-handler", "--no-python",
                 "--run-path", "--log-dir", "--local-ranks-filter", "--duplicate-stdout-filters",
                 "--duplicate-stderr-filters", "--master-addr", "--master-port", "--local-addr", "--logs-specs",
                 "--numa-binding", "--signals-to-handle", "--shutdown-timeout", "--virtual-local-rank",
                 "--max-failures", "--storage-path", "--cpus-per-worker", "--gpus-per-worker"):
        for spelled in (flag, "--" + flag[2:].replace("-", "_")):
            value = {"--start-method": ["spawn"], "--no-python": [], "--run-path": [], "--virtual-local-rank": [],
                     "--node-rank": ["0"], "--master-port": ["29500"], "--max-restarts": ["1"], "--max-failures": ["1"],
                     "--monitor-interval": ["0.5"], "--shutdown-timeout": ["5"], "--cpus-per-worker": ["0.5"],
                     "--gpus-per-worker": ["0"], "--signals-to-handle": ["SIGTERM"],
                     "--nproc-per-node": ["2"]}.get(flag, ["x"])
            args = parse(spelled, *value, script)
            assert args.script == script and list(args.spelled.values()) == [spelled]


def test_nproc_per_node_number_gpu_cpu_auto(script, monkeypatch):
    assert plan("--nproc-per-node", "2", script).num_workers == 2
    assert plan("--nproc_per_node=3", script).num_workers == 3
    assert plan("--nproc", "4", script).num_workers == 4  # trainkit's own spelling stays
    assert plan(script).num_workers == 1
    assert plan("--nproc-per-node", "cpu", script).num_workers == os.cpu_count()
    monkeypatch.setattr(launch_command, "_visible_gpus", lambda: 0)
    assert plan("--nproc-per-node", "auto", script).num_workers == os.cpu_count()
    assert plan("--nproc-per-node", "auto", script).resources == {"CPU": 1.0}
    with pytest.raises(UsageError, match="--nproc-per-node gpu: no GPU is visible here"):
        plan("--nproc-per-node", "gpu", script)
    monkeypatch.setattr(launch_command, "_visible_gpus", lambda: 3)
    for value in ("gpu", "auto"):  # one rank per GPU; each sees them all, as under torchrun (nothing reserved)
        p = plan("--nproc-per-node", value, script)
        assert p.num_workers == 3 and p.resources == {"CPU": 1.0}
    assert plan("--nproc-per-node", "gpu", "--gpus-per-worker", "0.5", script).resources == {"CPU": 1.0, "GPU": 0.5}
    for value, message in (("0", "--nproc_per_node 0: expected 1 or more"),
                           ("tpu", "--nproc_per_node tpu: expected a number, gpu, cpu or auto")):
        with pytest.raises(UsageError, match=message):
            plan("--nproc_per_node", value, script)


def test_nnodes_places_nodes_worth_of_ranks_and_min_max_is_elastic(script):
    p = plan("--nnodes", "2", "--nproc-per-node", "3", script)
    assert p.num_workers == 6 and p.size_flag == "--nnodes 2 x --nproc-per-node"
    assert "--nnodes 2: no RAY_ADDRESS, so all 6 ranks run on this machine" in p.note
    assert plan("--nnodes=1:1", "--nproc-per-node=2", script).num_workers == 2
    assert plan("--nnodes=1:4", "--nproc-per-node=2", script).num_workers == (2, 8)
    for bad in ("0", "3:2", "a", "1:2:3"):
        with pytest.raises(UsageError, match=f"--nnodes {bad}: expected N or MIN:MAX with 1 <= MIN <= MAX"):
            plan("--nnodes", bad, script)


def test_a_node_rank_other_than_0_has_nothing_to_run(script, monkeypatch):
    p = plan("--nnodes", "2", "--nproc-per-node", "4", "--node_rank", "1", "--master-addr", "10.0.0.1", script)
    assert p.skip.startswith("--node_rank 1: nothing to run here. trainkit launch runs once, on one machine, for the "
                             "whole cluster: node rank 0's launch places all 8 ranks")
    p = plan("--nnodes", "2", "--node-rank", "0", script)
    assert not p.skip and p.num_workers == 2 and "--node-rank: not needed" in p.note
    with pytest.raises(UsageError, match="--node-rank 2: expected 0 to 1"):
        plan("--nnodes", "2", "--node-rank", "2", script)
    monkeypatch.setenv("SLURM_NODEID", "1")  # `srun trainkit launch --nnodes 2 ...`: one launch per node
    assert plan("--nnodes", "2", script).skip.startswith("SLURM_NODEID 1: nothing to run here")
    assert not plan(script).skip  # one node: SLURM_NODEID is no node rank
    assert not plan("--nnodes", "2", "--node-rank", "0", script).skip  # the flag wins
    with pytest.raises(UsageError, match="--node-rank 1: expected 0 to 0"):
        plan("--node-rank", "1", script)


def test_pet_environment_variables_are_defaults_as_under_torchrun(script, monkeypatch):
    """Kubeflow's PyTorchJob sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, ... for `torchrun train.py`."""
    monkeypatch.setenv("PET_NPROC_PER_NODE", "2")
    monkeypatch.setenv("PET_NNODES", "2")
    monkeypatch.setenv("PET_MAX_RESTARTS", "3")
    monkeypatch.setenv("PET_MODULE", "1")
    p = plan("pkg.train")
    assert p.num_workers == 4 and p.config["max_restarts"] == 3 and p.config["mode"] == "module"
    assert plan("--nproc-per-node", "1", "pkg.train").num_workers == 2  # the flag wins
    monkeypatch.setenv("PET_NODE_RANK", "1")
    assert plan("pkg.train").skip.startswith("PET_NODE_RANK 1: nothing to run here")


def test_module_no_python_and_run_path(script, tmp_path):
    p = plan("-m", "pkg.train", "--lr", "1")
    assert p.config["mode"] == "module" and p.config["script"] == "pkg.train" and p.name.startswith("pkg.train_")
    assert launch.command(p.config) == [sys.executable, "-m", "pkg.train", "--lr", "1"]
    assert plan("--module", "pkg.train").config["mode"] == "module"
    p = plan("--no-python", "bash", "-c", "echo hi")
    assert launch.command(p.config) == ["bash", "-c", "echo hi"]
    executable = tmp_path / "run.sh"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    p = plan("--no_python", "./run.sh", "x")
    assert launch.command(p.config) == [str(executable), "x"] and p.name.startswith("run.sh_")
    assert launch.command(plan(script, "--a").config) == [sys.executable, script, "--a"]
    p = plan("--run-path", "--no-python", script)  # --run-path wins over --no-python, as under torchrun
    assert p.config["mode"] == "script" and "--run-path: not needed" in p.note
    for argv, message in ((["-m", "--no-python", "pkg.train"], "--no-python and -m/--module: not both"),
                          (["--no-python", "no-such-command-here"], "is not a command on PATH"),
                          (["--no-python", script], "is not an executable file"),
                          (["missing.py"], "script 'missing.py' is not a file")):
        with pytest.raises(UsageError, match=message):
            plan(*argv)


def test_everything_after_the_script_is_the_scripts(script):
    args = parse("--nproc-per-node", "2", script, "--nproc-per-node", "3", "-m", "--max-restarts", "9", "-r", "3")
    assert args.nproc_per_node == "2" and not args.module and args.max_failures == 0 and args.redirects is None
    assert args.script_args == ["--nproc-per-node", "3", "-m", "--max-restarts", "9", "-r", "3"]


def test_max_restarts_is_max_failures(script):
    assert plan("--max-restarts", "2", script).config["max_restarts"] == 2
    assert plan("--max_restarts=3", script).config["max_restarts"] == 3
    assert plan("--max-failures", "-1", script).config["max_restarts"] == -1
    with pytest.raises(UsageError, match="--max-restarts -2: expected -1 or more"):
        plan("--max-restarts", "-2", script)


def test_moot_flags_are_accepted_with_one_note(script):
    p = plan("--standalone", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", "--rdzv-id", "456",
             "--rdzv_conf", "timeout=5", "--master-addr", "h", "--master_port", "29500", "--local-addr", "h",
             "--start-method", "fork", "--monitor-interval", "1", "--role", "trainer",
             "--numa-binding", "node", "--event-log-handler", "console", "--logs-specs", "x",
             "--duplicate-stdout-filters", "a,b", "--duplicate_stderr_filters", "c", "--nproc-per-node", "2", script)
    assert p.num_workers == 2 and p.config["role"] == "trainer"
    assert p.note == ("--standalone, --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv_conf, --master-addr, "
                      "--master_port, --local-addr, --start-method, --monitor-interval: not needed, ignored (this one "
                      "command places all 2 ranks on Ray and sets their MASTER_ADDR/MASTER_PORT; each rank is a fresh "
                      "process); --event-log-handler, --logs-specs, --numa-binding, --duplicate-stdout-filters, "
                      "--duplicate_stderr_filters: not supported, ignored")
    assert plan("--nproc-per-node", "2", script).note == ""  # nothing to say: nothing printed
    with pytest.raises(SystemExit):  # a choice torchrun refuses
        parse("--start-method", "thread", script)


def test_log_dir_redirects_tee_and_local_ranks_filter(script, tmp_path):
    logs = plan("--log-dir", "logs", script).config["logs"]
    assert logs == {"root": str(tmp_path / "logs"), "redirects": (0, {}), "tee": (3, {})}  # alone: a copy of all
    logs = plan("--log_dir", "logs", "-r", "0:1,1:2", "-t", "2", script).config["logs"]
    assert logs["redirects"] == (0, {0: 1, 1: 2}) and logs["tee"] == (2, {})
    logs = plan("--redirects", "3", script).config["logs"]
    assert logs["root"] == launch_command.LOG_DIR_DEFAULT and logs["redirects"] == (3, {})
    assert plan(script).config["logs"] is None
    for flag in ("-r", "--tee"):
        for bad in ("4", "x", "0:5", "0-1"):
            with pytest.raises(UsageError, match=f"{flag} {bad}: expected 0-3"):
                plan(flag, bad, script)
    assert plan("--local-ranks-filter", "0,2", script).console_ranks == {0, 2}
    assert plan("--local_ranks_filter=1", script).console_ranks == {1}
    assert plan(script).console_ranks is None
    with pytest.raises(UsageError, match="--local-ranks-filter 'a': expected ranks separated by commas"):
        plan("--local-ranks-filter", "a", script)


class _Context:
    experiment_name, attempt = "run", 1

    def __init__(self, rank, local_rank):
        self.world_rank, self.local_rank = rank, local_rank


def test_redirects_and_tee_per_local_rank(tmp_path):
    """-r: only to the file; -t: the file and the console; by local rank, files by rank."""
    spec = {"root": str(tmp_path), "redirects": (0, {0: 1}), "tee": (0, {0: 2, 1: 3})}
    files = launch._log_files(spec, _Context(4, 0))
    (out, out_file), (err, err_file) = files[1], files[2]
    assert out is None and out_file.name == str(tmp_path / "run" / "attempt_1" / "4" / "stdout.log")
    assert err is sys.stderr and err_file.name.endswith("4/stderr.log")
    files = launch._log_files(spec, _Context(5, 1))
    assert files[1][0] is sys.stdout and files[1][1] is not None and files[2][0] is sys.stderr
    files = launch._log_files(spec, _Context(6, 2))
    assert files == {1: (sys.stdout, None), 2: (sys.stderr, None)} == launch._log_files(None, _Context(6, 2))
    for f in (out_file, err_file):
        f.close()


def test_local_ranks_filter_shows_only_those_ranks_on_the_console(capsys):
    shown = display.Display(1, "run")
    with display.console_ranks(frozenset({1})):
        shown.worker_output(0, "same line")
        shown.worker_output(1, "same line")  # rank 0's copy was not shown: this one is
        shown.worker_output(2, "other")
    shown.worker_output(2, "after")
    assert capsys.readouterr().out == "(rank 1) same line\n(rank 2) after\n"


def test_the_trainkit_command_takes_torchruns_command_line(script, monkeypatch):
    """Through `trainkit launch ...` itself (cli.main): what was refused as "unrecognized arguments"."""
    seen = []
    monkeypatch.setattr(launch_command, "main", lambda args: seen.append(launch_command.plan(args)) or 0)
    assert cli.main(["launch", "--standalone", "--nnodes=1", "--nproc-per-node=2", script, "--lr", "1"]) == 0
    assert cli.main(["launch", "--nproc_per_node", "2", "-m", "pkg.train"]) == 0
    assert [(p.num_workers, p.config["mode"], p.config["args"]) for p in seen] == [(2, "script", ["--lr", "1"]),
                                                                                   (2, "module", [])]


def test_a_node_rank_other_than_0_exits_0_without_starting_anything(script, capsys):
    assert launch_command.main(parse("--nnodes", "2", "--node-rank", "1", script)) == 0
    assert "nothing to run here" in capsys.readouterr().err
    assert launch_command.main(parse("--nnodes", "x", script)) == 2
    assert "trainkit launch: --nnodes x: expected" in capsys.readouterr().err
