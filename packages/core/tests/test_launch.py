"""`trainkit launch`: a plain script (no trainkit in it, or one that calls trainkit.report) on 2
workers, run as the real command."""

import json
import os
import sys
import textwrap

import trainkit
from trainkit.testing import subprocesses

SCRIPT = textwrap.dedent('''
    import argparse, json, os, sys, tempfile, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR",
            "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"]
    seen = {k: os.environ.get(k) for k in keys}
    seen.update(name=__name__, argv=sys.argv[1:])
    name = "env_%s_%s.json" % (os.environ["RANK"], seen["TORCHELASTIC_RESTART_COUNT"])
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(seen, f)
    print("hello from rank", os.environ["RANK"])
    if args.exit_code:
        sys.exit(args.exit_code)
    import trainkit
    if checkpoint := trainkit.get_checkpoint():  # the second attempt: resumes where the first reported
        weights = open(os.path.join(checkpoint.path, "weights_1")).read()
        trainkit.report({"loss": 0.25, "resumed_from": weights})
        sys.exit(0)
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "weights_" + os.environ["RANK"]), "w").write(os.environ["RANK"])
        trainkit.report({"loss": 0.5, "rank": trainkit.get_context().get_world_rank()},
                        checkpoint=trainkit.Checkpoint.from_directory(tmp))
    reported = os.path.join(args.out, "rank0-reported")
    if os.environ["RANK"] == "0":
        open(reported, "w").close()
    else:  # fails once the driver logged the report of both ranks (the process exits: a kill, to the driver)
        while not os.path.exists(reported):
            time.sleep(0.01)
        from trainkit.testing.steps import wait_until_logged
        wait_until_logged(1)
        sys.exit(5)
''')


def launch(tmp_path, name, *script_args, max_failures=0):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "2", "--cpus-per-worker", "0.5",
                             "--max-failures", str(max_failures), "--storage-path", str(tmp_path / "runs"),
                             "--name", name, str(script),
                             "--out", str(tmp_path), *script_args], capture_output=True, text=True, timeout=120)


def test_launch_sets_torchrun_env_script_reports_and_resumes_after_a_restart(tmp_path):
    out = launch(tmp_path, "plain", max_failures=1)
    assert out.returncode == 0, out.stderr[-3000:]
    for attempt in (0, 1):
        envs = [json.loads((tmp_path / f"env_{rank}_{attempt}.json").read_text()) for rank in (0, 1)]
        for rank, env in enumerate(envs):
            assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
            assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
            assert env["GROUP_RANK"] == env["NODE_RANK"] == "0" and env["TORCHELASTIC_RESTART_COUNT"] == str(attempt)
            assert env["name"] == "__main__" and env["argv"] == ["--out", str(tmp_path)]
        assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] == "127.0.0.1"
        assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] and int(envs[0]["MASTER_PORT"]) > 0
    assert "(rank 0) hello from rank 0" in out.stdout and "(rank 1) hello from rank 1" in out.stdout
    run = tmp_path / "runs" / "plain"
    state = json.loads((run / "run_state.json").read_text())
    assert state["status"] == "finished"
    assert trainkit.Result.from_path(str(run)).metrics == {"loss": 0.25, "resumed_from": "1"}  # metrics.jsonl's last
    assert [(f["attempt"], f["rank"], f["type"]) for f in state["failures"]] == [(0, 1, "ScriptExitError")]
    assert (run / "checkpoint_000000" / "weights_1").read_text() == "1"
    assert (run / "logs" / "attempt_1" / "rank_0.txt").read_text() == "hello from rank 0\n"


def test_launch_exit_status_is_the_scripts(tmp_path):
    out = launch(tmp_path, "exits", "--exit-code", "3")
    assert out.returncode == 3, out.stderr[-3000:]
    state = json.loads((tmp_path / "runs" / "exits" / "run_state.json").read_text())
    assert state["status"] == "failed" and "exited with status 3" in state["error"]


def test_launch_bad_arguments_fail_before_starting(tmp_path):
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "0", "missing.py"],
                           capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--nproc 0: expected 1 or more" in out.stderr
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", str(tmp_path / "missing.py")],
                           capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is not a file" in out.stderr
    script = tmp_path / "train.py"
    script.write_text("")
    for flags, message in ((["--signals-to-handle", "SIGTERM,SIGFOO,SIGKILL"], "--signals-to-handle SIGFOO,SIGKILL: "
                             "expected signal names a process can catch"),
                           (["--shutdown-timeout", "-1"], "--shutdown-timeout -1.0: expected 0 or more seconds")):
        out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", *flags, str(script)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr, out.stderr
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", str(script)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"})
    assert out.returncode == 2 and "--shutdown-timeout 'soon': expected a number of seconds" in out.stderr
