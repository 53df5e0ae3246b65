"""trainkit.testing catches what it claims to: leak guards fail leaking tests, the requirements
marker skips with a readable reason, and the conformance suite fails a plugin with a seeded mistake
(reversed ranks, a no-op teardown, a broken Trainer, no communication, a rendezvous on 127.0.0.1 or a
fixed port, data sharded by local rank, a report callback on rank 0 alone, a resume helper that
ignores its checkpoint, a Trainer that drops the user's RunConfig or its own config keyword, warnings
turned off at load, an unbounded or unresolvable dependency, a pin on core's release; and one per class
of what hurts a plugin's users, caught by running its journey under the kit's conditions) and passes
the correct one."""

import os
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

from trainkit.testing import requires


@pytest.fixture
def run_tests(pytester):
    pytester.makeconftest('pytest_plugins = ["trainkit.testing"]')

    def run(source: str, *args: str):
        pytester.makepyfile(test_subject=textwrap.dedent(source))
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args)

    return run


def test_leak_guards_fail_the_leaking_tests(run_tests):
    result = run_tests("""
        import os, subprocess, threading, time

        def test_env(no_leaked_env):
            os.environ["TRAINKIT_LEAK"] = "1"

        def test_thread(no_leaked_threads):
            threading.Thread(target=time.sleep, args=(60,), daemon=True, name="leaker").start()

        def test_process(no_leaked_processes):
            subprocess.Popen(["sleep", "60"])

        def test_clean(no_leaked_env, no_leaked_threads, no_leaked_processes):
            t = threading.Thread(target=time.sleep, args=(0.2,))
            t.start()
            subprocess.run(["true"])
    """, "--timeout=120")
    result.assert_outcomes(passed=4, errors=3)
    result.stdout.fnmatch_lines(["*leaked environment variables: TRAINKIT_LEAK*",
                                 "*leaked threads: leaker*", "*leaked processes:", "*sleep 60"])


WORKER = """
import signal, sys, time
def shut_down_slowly(*_):
    time.sleep(12)  # a worker ending on a loaded machine
    sys.exit(0)
signal.signal(signal.SIGTERM, shut_down_slowly)
print("ready", flush=True)
time.sleep(600)
"""

RAYLET = """
import subprocess, sys
workers = []
for line in sys.stdin:
    if line == "start\\n":
        workers.append(subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True))
        workers[-1].stdout.readline()
    for worker in workers:
        if line == "stop\\n":
            worker.terminate()
        elif line == "kill\\n":
            worker.kill()
    print("done", flush=True)
for worker in workers:
    worker.wait()
"""


def test_process_guard_waits_for_the_clusters_processes_to_exit_and_still_reports_a_leak(run_tests):
    """A worker of the cluster (a child of a process that ran before the test, as the raylet is)
    that takes 12 s to exit once stopped, longer than the guard's 10 s grace for what the test
    started itself, is waited for, not reported; one never stopped is reported, at the limit."""
    result = run_tests(f"""
        import subprocess, sys
        import pytest
        from trainkit.testing import fixtures

        @pytest.fixture(scope="module")
        def raylet():
            proc = subprocess.Popen([sys.executable, "-c", {RAYLET!r}, {WORKER!r}], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)

            def send(command):
                proc.stdin.write(command + "\\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == "done\\n"

            yield send
            send("kill")
            proc.stdin.close()
            proc.wait(timeout=60)

        def test_a_stopped_worker_exits_slowly(raylet, no_leaked_processes):
            raylet("start")
            raylet("stop")

        def test_a_worker_never_stopped(raylet, no_leaked_processes):
            fixtures._STOPPING_S = 3.0  # the last test of this session
            raylet("start")
    """, "--timeout=120")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_a_worker_never_stopped*", "*leaked processes:",
                                 "*import signal, sys, time*"])


def test_env_guard_does_not_depend_on_which_test_first_imports_a_framework(run_tests, pytester):
    pytester.makepyfile(fw_sets_env="import os\nos.environ['FW_HOME'] = '/opt/fw'  # as some frameworks do\n")
    result = run_tests("""
        import os, pytest

        @pytest.fixture
        def preimported_modules(preimported_modules):
            return (*preimported_modules, "fw_sets_env")

        def test_imports_it_first(no_leaked_env):
            import fw_sets_env

        def test_leaks_per_run(no_leaked_env):
            import fw_sets_env
            os.environ["FW_RUN"] = "1"
    """)
    result.assert_outcomes(passed=2, errors=1)  # the leak errors in the guard's teardown
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaks_per_run*",
                                 "*leaked environment variables: FW_RUN (restored)*"])


def test_requires_skips_with_a_reason_naming_what_is_missing(run_tests):
    result = run_tests("""
        from trainkit.testing import requires

        @requires(pytest=">=1")
        def test_met(): pass

        @requires(pytest="<1")
        def test_old(): pass

        @requires(no_such_framework=">=2")
        def test_missing(): pass

        @requires(gpus=64)
        def test_gpus(): pass
    """)
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines_random(["*needs pytest<1 (installed: *)*", "*needs no-such-framework>=2 (not installed)*",
                                        "*needs 64 GPUs (found *)*"])


def test_requires_rejects_a_bad_specifier():
    with pytest.raises(ValueError, match="torch='2.x'"):
        requires(torch="2.x")


TOY = Path(__file__).parent / "conformance_toy"  # toyfw and its plugin, trainkit-toyfw


def _install_toy_plugin(site: Path, monkeypatch, module: str = "trainkit_toyfw", requires: tuple[str, ...] = ()) -> None:
    """trainkit-toyfw as an installed distribution with its entry point (and ``requires`` as its
    Requires-Dist), beside a toyfw 1.0 distribution, for the subprocess and its workers."""
    info = site / "trainkit_toyfw-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trainkit-toyfw\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "entry_points.txt").write_text(f"[trainkit.plugins]\ntoy = {module}\n")
    (site / "toyfw-1.0.dist-info").mkdir()
    (site / "toyfw-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfw\nVersion: 1.0\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(TOY), os.environ.get("PYTHONPATH", "")]))


def _outcomes(report: Path) -> dict[str, str]:
    """Each test case of a junit report, as ``Class.test``: "" when it passed, else its problems."""
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        problem = next((case.find(tag) for tag in ("failure", "error", "skipped") if case.find(tag) is not None), None)
        key = f"{case.get('classname').rsplit('.', 1)[-1]}.{case.get('name')}"
        outcomes[key] = outcomes.get(key, "") + ("" if problem is None else
                                                 f" {problem.tag}: {problem.get('message')} {problem.text or ''}")
    return outcomes


# About 30 conformance tests in one pytest run, each with its own clusters (the two-node probe
# starts a multi-node one): 270 s on a busy CI machine. The default 300 s is a hang detector sized
# for one test; each inner test keeps it (--timeout=300 below).
@pytest.mark.timeout(1800)
def test_backend_conformance_fails_each_seeded_mistake_and_passes_the_correct_plugin(run_tests, tmp_path,
                                                                                     monkeypatch):
    _install_toy_plugin(tmp_path / "site", monkeypatch, requires=("trainkit-core>=0.1,<0.2",))
    report = tmp_path / "report.xml"
    result = run_tests("""
        import trainkit
        from trainkit import BackendConfig
        from trainkit.testing import BackendConformance, CheckpointConformance
        import trainkit_toyfw as toy

        def framework_rank():
            import toyfw  # imported on first use, as a framework is: the env guard must not mind
            return toyfw.get_rank()

        def all_gather(value):
            import toyfw
            return toyfw.all_gather(value)

        def is_initialized():
            import toyfw
            return toyfw.is_initialized()

        class Toy(BackendConformance):
            framework_modules = ("toyfw",)
            framework_rank, all_gather, is_initialized = map(staticmethod, (framework_rank, all_gather, is_initialized))

        class TestToy(Toy):
            backend_config = toy.ToyConfig()
            shard, report_callback = staticmethod(toy.shard), staticmethod(toy.report_callback)

        class TestReversedRanks(Toy):
            backend_config = toy.ReversedRanksConfig()

        class TestNoTeardown(Toy):
            backend_config = toy.NoTeardownConfig()

        class TestBrokenTrainer(Toy):
            backend_config = toy.BrokenTrainerConfig()

        class TestDropsConfig(Toy):
            backend_config = toy.DropsConfigConfig()

        class TestDropsOwnKeyword(Toy):  # its Trainer's toy_config= keyword, found from its signature
            backend_config = toy.OwnKeywordConfig()

        class TestOwnRunConfig(Toy):
            backend_config = toy.OwnRunConfigConfig()

        class TestLoopback(Toy):
            backend_config = toy.LoopbackConfig()

        class TestShardByLocalRank(Toy):
            backend_config = toy.ToyConfig()
            shard = staticmethod(toy.shard_by_local_rank)

        class TestFixedPort(Toy):
            backend_config = toy.FixedPortConfig()

        class TestRank0Report(Toy):
            backend_config = toy.ToyConfig()
            report_callback = staticmethod(toy.rank0_report_callback)

        class TestNoCommunication(Toy):  # each rank keeps its own value
            backend_config = BackendConfig()
            framework_rank = staticmethod(lambda: trainkit.get_context().get_world_rank())
            all_gather = staticmethod(lambda value: [value])

        class TestToyCheckpointIO(CheckpointConformance):
            checkpoint_io = toy.ToyCheckpointIO()
            resume = staticmethod(toy.resume)

            def make_state(self, seed):
                return {"weights": [1.0, 2.0 + seed]}

        class TestEveryRankCheckpointIO(TestToyCheckpointIO):
            checkpoint_io = toy.EveryRankCheckpointIO()

        class TestLastSavedCheckpointIO(TestToyCheckpointIO):
            checkpoint_io = toy.LastSavedCheckpointIO()
            resume = staticmethod(toy.resume_last_saved)
    """, "-k", "(TestToy and not lower_bound and not resolve and not journey) or (ReversedRanks and ranks_and) "
               "or (NoTeardown and (shutdown or local)) or (BrokenTrainer and registered) "
               "or (DropsConfig and registered_trainers) or (DropsOwnKeyword and registered_trainers) "
               "or (OwnRunConfig and run_config) or (Loopback and two_nodes) or (ShardByLocalRank and two_nodes) "
               "or (FixedPort and two_runs) or (Rank0Report and report_callback) "
               "or (NoCommunication and ranks_and) or (EveryRank and run_and_resume) or (LastSaved and resume_helper)",
         f"--junitxml={report}", "--timeout=300")
    outcomes = _outcomes(report)
    passed = sorted(k for k, v in outcomes.items() if not v)
    assert passed == [f"TestToy.test_{name}" for name in (
        "data_helper_splits_the_data_over_the_ranks",
        "failure_on_one_rank_surfaces_with_its_rank", "framework_ranks_and_collective_follow_trainkit_ranks",
        "installed_plugin_leaves_other_backends_runs_alone", "loading_plugins_imports_no_framework", "loading_the_plugin_changes_no_process_state", "local_mode",
        "ranks_on_two_nodes", "registered_trainer_keeps_the_users_run_config", "registered_trainers_fit",
        "report_callback_reaches_the_driver_from_every_rank", "shutdown_tears_the_framework_down_and_is_repeatable",
        "trainkit_requirement_allows_the_next_bug_fix_release", "two_runs_at_once_on_one_host")] + [f"TestToyCheckpointIO.test_{name}" for name in (
        "altered_file_is_refused", "resume_helper_resumes_the_checkpoint_it_is_given", "round_trip_in_process",
        "round_trip_through_a_run_and_resume")], result.stdout.str()[-6000:]
    expected = {
        "TestReversedRanks.test_framework_ranks_and_collective_follow_trainkit_ranks":
            "TestReversedRanks: on trainkit rank 0 framework_rank() returned 1, expected 0",
        "TestNoTeardown.test_shutdown_tears_the_framework_down_and_is_repeatable":
            "run 1: is_initialized() is still true on rank(s) [0, 1] after ToyBackend.on_shutdown",
        "TestNoTeardown.test_local_mode": "is_initialized() is still true in the driver after local mode ended",
        "TestBrokenTrainer.test_registered_trainers_fit":
            "the registered BrokenTrainer.fit() failed: ",
        "TestDropsConfig.test_registered_trainers_fit":
            "the registered DropsConfigTrainer dropped the user's config: built with backend_config=",
        "TestEveryRankCheckpointIO.test_round_trip_through_a_run_and_resume": "EveryRankCheckpointIO.report ",
        "TestDropsOwnKeyword.test_registered_trainers_fit":
            "the registered OwnKeywordTrainer dropped the user's config: built with toy_config=",
        "TestOwnRunConfig.test_registered_trainer_keeps_the_users_run_config":
            "the registered OwnRunConfigTrainer ignored the user's RunConfig: built with run_config=RunConfig("
            "failure_config=FailureConfig(max_failures=1)), the run failed on its first failure",
        "TestLoopback.test_ranks_on_two_nodes": "ranks talk across nodes through 127.0.0.1: rank 1 (node 127.0.0.",
        "TestShardByLocalRank.test_ranks_on_two_nodes":
            "the data helper (shard) gave rank 0 (node rank 0, local rank 0) and rank 1 (node rank 1, local rank 0) "
            "the same rows [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] of 12: shard by the global rank",
        "TestFixedPort.test_two_runs_at_once_on_one_host": "of two runs at once on one host failed: ",
        "TestRank0Report.test_report_callback_reaches_the_driver_from_every_rank":
            "3 steps reported through report_callback on 2 ranks reached the driver as 0 report(s)",
        "TestLastSavedCheckpointIO.test_resume_helper_resumes_the_checkpoint_it_is_given":
            "resume(checkpoint) given the checkpoint at ",
        "TestNoCommunication.test_framework_ranks_and_collective_follow_trainkit_ranks":
            "TestNoCommunication: on rank 0 all_gather(rank) returned [0.0], expected [0.0, 1.0]",
    }
    for test, message in expected.items():
        assert message in outcomes[test], (test, outcomes[test])
    assert "toyfw is not initialized" in outcomes["TestBrokenTrainer.test_registered_trainers_fit"]
    assert "Address already in use" in outcomes["TestFixedPort.test_two_runs_at_once_on_one_host"]
    # a backend that leaks env in the driver is still caught, though toyfw sets a variable at import
    assert "leaked environment variables: TOYFW_LOCAL (restored)" in outcomes["TestNoTeardown.test_local_mode"]


JOURNEYS = """
    import functools
    from trainkit.testing import NOT_PROVIDED, BackendConformance
    import trainkit_toyfw as toy

    def framework_rank():
        import toyfw
        return toyfw.get_rank()

    def all_gather(value):
        import toyfw
        return toyfw.all_gather(value)

    def is_initialized():
        import toyfw
        return toyfw.is_initialized()

    class Toy(BackendConformance):
        backend_config = toy.ToyConfig()
        framework_modules = ("toyfw",)
        framework_rank, all_gather, is_initialized = map(staticmethod, (framework_rank, all_gather, is_initialized))
        shard, report_callback = staticmethod(toy.shard), staticmethod(toy.report_callback)
        journey = staticmethod(toy.journey)
        launcher_env = {"TOYFW_RANK": "3"}

    class TestToy(Toy):
        pass

    class TestNoJourney(Toy):  # written before the journey existed
        journey = None

    class TestOptsOut(Toy):
        journey = NOT_PROVIDED("toyfw has no training loop to run")

    class TestSkipsOneWorker(Toy):
        backend_config = toy.SkipsOneWorkerConfig()

    class TestForgiving(Toy):
        backend_config = toy.ForgivingConfig()

    class TestDropsRemainder(Toy):
        journey = functools.partial(toy.journey, prepare=toy.prepare_rows_evenly)

    class TestWeightsOnlyResume(Toy):
        journey = functools.partial(toy.journey, restore=toy.resume_weights_only)

    class TestSharedCheckpointDir(Toy):
        journey = functools.partial(toy.journey, io=toy.FixedDirCheckpointIO())

    class TestEnvRank(Toy):
        backend_config = toy.EnvRankConfig()

    class TestStaleTimer(Toy):
        backend_config = toy.StaleTimerConfig()
"""

#: each seeded mistake of the journey's classes: the probe that catches it and what its message says
JOURNEY_MISTAKES = {
    "TestNoJourney.test_journey_runs_at_every_world_size":
        "TestNoJourney sets no `journey`, which this probe needs. Add to the class:",
    "TestSkipsOneWorker.test_journey_runs_at_every_world_size":
        "TestSkipsOneWorker: plainly, the journey failed at 1 worker (ScalingConfig()'s default): RuntimeError",
    "TestForgiving.test_journey_failure_on_one_rank_reaches_the_caller":
        "the registered ForgivingTrainer.fit() returned (reports for steps [",
    "TestDropsRemainder.test_journey_runs_at_every_world_size":
        "TestDropsRemainder: plainly, at 2 workers, the journey's data helper: no rank got rows [6] of 7 over 2 "
        "rank(s)",
    "TestWeightsOnlyResume.test_journey_stopped_and_resumed_equals_the_straight_run":
        "TestWeightsOnlyResume: the journey stopped after step 2 and resumed reported losses",
    "TestSharedCheckpointDir.test_two_journeys_at_once_on_one_host": "the runs' checkpoints mixed",
    "TestStaleTimer.test_journey_retried_after_a_failed_first_attempt_equals_the_straight_run":
        "TestStaleTimer: retried after attempt 0's setup half failed, the journey failed at 2 workers: "
        "RuntimeError",
    "TestEnvRank.test_journey_with_launcher_variables_in_the_drivers_environment":
        "TestEnvRank: with a launcher's variables in the driver's environment, in local mode (num_workers=0), the "
        "journey's data helper: no rank got rows [0, 1, 2] of 7",
}


@pytest.mark.timeout(1800)
def test_journey_probes_fail_each_seeded_mistake_and_pass_the_correct_plugin(run_tests, tmp_path, monkeypatch):
    """The journey under the kit's conditions, on toyfw's plugin and on seeded copies of it, each with
    one mistake of a class users were hurt by: each caught by its probe with a message that says
    what to fix; a suite without the hook fails with the line to add; an opt-out skips, listed."""
    _install_toy_plugin(tmp_path / "site", monkeypatch, requires=("trainkit-core>=0.1,<0.2",))
    report = tmp_path / "report.xml"
    selected = " or ".join([f"({test.replace('.', ' and ')})" for test in JOURNEY_MISTAKES]
                           + ["(TestToy and journey)", "(TestOptsOut and every_world_size)"])
    result = run_tests(JOURNEYS, "-k", selected, f"--junitxml={report}", "--timeout=300")
    outcomes = _outcomes(report)
    passed = sorted(k for k, v in outcomes.items() if not v)
    assert passed == [f"TestToy.test_journey_{name}" for name in (
        "failure_on_one_rank_reaches_the_caller", "retried_after_a_failed_first_attempt_equals_the_straight_run",
        "runs_at_every_world_size", "runs_in_local_mode", "stopped_and_resumed_equals_the_straight_run",
        "with_launcher_variables_in_the_drivers_environment")] + ["TestToy.test_two_journeys_at_once_on_one_host"], (
        result.stdout.str()[-6000:])
    for test, message in JOURNEY_MISTAKES.items():
        assert message in outcomes[test], (test, outcomes[test])
    assert outcomes["TestOptsOut.test_journey_runs_at_every_world_size"].startswith(" skipped")
    result.stdout.fnmatch_lines(["*trainkit conformance: opted out*",
                                 "TestOptsOut.journey = NOT_PROVIDED('toyfw has no training loop to run')"])


LOAD_PROBES = """
    from trainkit.testing import BackendConformance
    import trainkit_toyfw as toy

    class TestToy(BackendConformance):
        backend_config = toy.ToyConfig()
        framework_modules = ("toyfw",)
"""


@pytest.mark.parametrize("module, requires, fails", [
    ("trainkit_toyfw_fw", ("toyfw>=1.0", "trainkit-core"), {}),
    ("trainkit_toyfw_noisy", ("toyfw>=1.0", "trainkit-core"), {"loading_the_plugin_changes_no_process_state":
                                  "importing trainkit_toyfw and loading the plugin 'toy' changed the process: "
                                  "warnings filters: added [\"('ignore', None, <class 'Warning'>, None, 0)\"]"}),
    ("trainkit_toyfw_fw", ("toyfw", "trainkit-core"), {"framework_is_declared_with_a_lower_bound":
                                       "trainkit-toyfw 1.0 requires toyfw without a lower bound"}),
    ("trainkit_toyfw_fw", ("toyfw>=1.0", "toyfw-gpu-kernels>=2", "trainkit-core"), {
        "declared_requirements_resolve_on_this_platform":
            "trainkit-toyfw requires toyfw-gpu-kernels>=2, but the package index has no release of "
            "toyfw-gpu-kernels for this Python and platform"}),
    # seeded: a pin on core's release of the day forbids its bug-fix releases
    ("trainkit_toyfw_fw", ("toyfw>=1.0", "trainkit-core==0.1.0"), {
        "trainkit_requirement_allows_the_next_bug_fix_release":
            "trainkit-toyfw 1.0 requires trainkit-core==0.1.0: an exact pin (==0.1.0) forbids every bug-fix release "
            "of trainkit-core, so a user who upgrades core for a fix (to 0.1.1) cannot keep the plugin installed. "
            "Declare a compatible range instead, such as 'trainkit-core>=0.1,<0.2'"}),
    ("trainkit_toyfw_fw", ("toyfw>=1.0", "trainkit-core>=0.1,<0.1.1"), {
        "trainkit_requirement_allows_the_next_bug_fix_release":
            "excludes trainkit-core 0.1.1 (core's next bug-fix release)"}),
], ids=["correct", "warnings-off-at-load", "framework-unbounded", "unresolvable-dependency", "core-pinned",
        "core-bounded-below-next-fix"])
def test_load_and_metadata_probes_fail_each_seeded_mistake(run_tests, tmp_path, monkeypatch, module, requires,
                                                           fails):
    """The probes that need no Ray, each on a plugin installed with one mistake (none: all pass). The
    package index is a local one holding toyfw 1.2.0 (pip's own configuration ignored)."""
    _install_toy_plugin(tmp_path / "site", monkeypatch, module=module, requires=requires)
    index = tmp_path / "simple" / "toyfw"
    index.mkdir(parents=True)
    (index / "index.html").write_text('<a href="toyfw-1.2.0.tar.gz">toyfw-1.2.0.tar.gz</a>')
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    result = run_tests(LOAD_PROBES, "-k", "process_state or lower_bound or resolve or trainkit_requirement", "-rfs")
    result.assert_outcomes(passed=4 - len(fails), failed=len(fails))
    for test, message in fails.items():
        result.stdout.fnmatch_lines([f"*FAILED test_subject.py::TestToy::test_{test}*"])
        assert message in result.stdout.str(), result.stdout.str()[-4000:]


@pytest.mark.parametrize("module, fails", [
    ("trainkit_toyfw", None),
    ("trainkit_toyfw_meddles", "with the plugin 'toy' installed, a run of another backend (trainkit's own "
                               "BackendConfig, 2 workers) differs from the same run with it disabled "
                               "(TRAINKIT_DISABLED_PLUGINS=toy): rank 0's environment OPENBLAS_NUM_THREADS: "
                               "'<unset>' -> '1'"),
], ids=["correct", "hook-meddles-with-every-run"])
def test_installed_plugin_probe_fails_a_plugin_that_changes_other_backends_runs(run_tests, tmp_path, monkeypatch,
                                                                                 module, fails):
    _install_toy_plugin(tmp_path / "site", monkeypatch, module=module)
    result = run_tests(LOAD_PROBES, "-k", "leaves_other_backends", "--timeout=300")
    result.assert_outcomes(passed=int(fails is None), failed=int(fails is not None))
    if fails:
        assert fails in result.stdout.str(), result.stdout.str()[-4000:]


def test_a_missing_backend_names_the_plugin_loaders_reason(run_tests, tmp_path, monkeypatch):
    _install_toy_plugin(tmp_path / "site", monkeypatch, module="trainkit_toyfw_typo")  # a typo in the entry point
    result = run_tests("""
        from trainkit.testing import BackendConformance, CheckpointConformance
        import trainkit_toyfw as toy

        class TestToy(BackendConformance):
            backend_config = toy.ToyConfig()
            framework_modules = ("toyfw",)
    """, "-k", "loading_plugins or (local_mode and not journey)")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(["*no loaded plugin registers ToyConfig*Plugin trainkit-toyfw (entry point "
                                        "'toy') error: ModuleNotFoundError: No module named 'trainkit_toyfw_typo'*"] * 2)


def test_requires_gpus_marks_the_test_for_the_gpu_session(run_tests):
    result = run_tests("""
        from trainkit.testing import requires

        @requires(gpus=1)
        def test_on_gpu(): pass

        def test_on_cpu(): pass
    """, "-m", "gpu")
    result.assert_outcomes(skipped=1, deselected=1)


def test_processes_ends_the_whole_tree_of_a_failed_test_and_defaults_sigint(run_tests, tmp_path):
    """A failing test's started process, its child in the same group and a grandchild that left the
    group (setsid, as a daemon does) are all gone when the test ends; SIGINT ignored in the test
    process (a CI job started in the background) is at its default in the started process."""
    pids = tmp_path / "pids"
    result = run_tests(f"""
        import signal, subprocess, sys, time

        TREE = '''
        import os, signal, subprocess, sys, time
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}} {{daemon.pid}}")
        time.sleep(600)
        '''

        def test_fails_with_a_tree_running(processes):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            proc = processes.start([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
            assert proc.stdout.readline() == "True\\n"
            while not __import__("os").path.exists({str(pids)!r}):
                time.sleep(0.05)
            raise AssertionError("the test fails with its processes running")

        def test_run_times_out_and_leaves_nothing(processes):
            try:
                processes.run([sys.executable, "-c", "print('started', flush=True); import time; time.sleep(600)"],
                              capture_output=True, text=True, timeout=5)
            except subprocess.TimeoutExpired as timed_out:
                assert timed_out.stdout in ("", "started\\n")  # whatever it wrote in time
            else:
                raise AssertionError("no timeout")
    """, "--timeout=300")
    result.assert_outcomes(passed=1, failed=1)
    import psutil

    left = [pid for pid in map(int, pids.read_text().split()) if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not left, left
