"""trainkit.testing catches what it claims to: leak guards fail leaking tests, the requirements
marker skips with a readable reason, and the conformance suite fails a backend that does not
communicate."""

import textwrap

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


def test_backend_conformance_fails_a_backend_that_does_not_communicate(run_tests):
    result = run_tests("""
        from trainkit import BackendConfig
        from trainkit.testing import BackendConformance

        class TestNoCommunication(BackendConformance):
            backend_config = BackendConfig()
            all_reduce_sum = staticmethod(lambda value: value)   # each rank keeps its own value
    """, "-k", "ranks or collective", "--timeout=240")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*TestNoCommunication.test_collective_communicates_across_workers*",
                                 "*assert ?1.0, 2.0? == ?3.0, 3.0?*"])  # each rank saw only its own value


def test_requires_gpus_marks_the_test_for_the_gpu_session(run_tests):
    result = run_tests("""
        from trainkit.testing import requires

        @requires(gpus=1)
        def test_on_gpu(): pass

        def test_on_cpu(): pass
    """, "-m", "gpu")
    result.assert_outcomes(skipped=1, deselected=1)
