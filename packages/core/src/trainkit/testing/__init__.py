"""Test support for trainkit and its plugins: opt-in pytest fixtures.

Enable in a ``conftest.py``::

    pytest_plugins = ["trainkit.testing"]

Fixtures:
    ray_cluster   a local Ray instance shared by a test module (4 logical CPUs, quiet), shut down after
    run_config    a factory of ``RunConfig`` objects writing under the test's ``tmp_path``
"""

from trainkit.testing.fixtures import ray_cluster, run_config

__all__ = ["ray_cluster", "run_config"]
