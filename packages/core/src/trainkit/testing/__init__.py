"""Test support for trainkit and its plugins: a pytest plugin, opt-in. Enable it in a ``conftest.py``::

    pytest_plugins = ["trainkit.testing"]

Fixtures:
    ray_cluster           a quiet local Ray instance for the test module (4 logical CPUs)
    run_config            a factory of quiet ``RunConfig`` objects writing under ``tmp_path``
    free_port             a free TCP port (``find_free_port()`` outside fixtures)
    no_leaked_env         fails a test that changes the test process's environment variables
    preimported_modules   what no_leaked_env imports before its snapshot (override it for a framework
                          that sets variables when imported)
    no_leaked_threads     fails a test that leaves threads running
    no_leaked_processes   fails a test that leaves child processes running
    processes             ``processes.start(...)``: a subprocess in its own session with default
                          SIGINT/SIGTERM, ended with its process group and Ray session when the
                          test ends (``trainkit.testing.subprocesses.run``: ``subprocess.run`` alike)

``simulated_cluster()``: a context manager giving a multi-node Ray cluster on this machine.

Suites a plugin's tests subclass: ``BackendConformance``, ``CheckpointConformance``; a hook the plugin
has no helper for is opted out of as ``NOT_PROVIDED("why")``, and the summary lists the opt-outs.
Marker: ``requires(torch=">=2.6", gpus=1)`` skips with a reason that says what is missing.
"""

from trainkit.testing._conformance.hooks import NOT_PROVIDED
from trainkit.testing.conformance import BackendConformance, CheckpointConformance
from trainkit.testing.fixtures import (
    find_free_port,
    free_port,
    no_leaked_env,
    no_leaked_processes,
    no_leaked_threads,
    preimported_modules,
    ray_cluster,
    run_config,
    simulated_cluster,
)
from trainkit.testing.subprocesses import processes
from trainkit.testing.requirements import gpu_count, requires

__all__ = [
    "BackendConformance",
    "CheckpointConformance",
    "NOT_PROVIDED",
    "find_free_port",
    "free_port",
    "gpu_count",
    "no_leaked_env",
    "no_leaked_processes",
    "no_leaked_threads",
    "preimported_modules",
    "processes",
    "ray_cluster",
    "requires",
    "run_config",
    "simulated_cluster",
]


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "gpu: needs a GPU (set by trainkit.testing.requires(gpus=n))")


def pytest_terminal_summary(terminalreporter) -> None:
    """The conformance hooks this run's plugin opted out of (``NOT_PROVIDED("why")``), with their reasons."""
    from trainkit.testing._conformance.hooks import OPT_OUTS

    if OPT_OUTS:
        terminalreporter.section("trainkit conformance: opted out")
        for suite, hook, why in sorted(set(OPT_OUTS)):
            terminalreporter.line(f"{suite}.{hook} = NOT_PROVIDED({why!r})")
