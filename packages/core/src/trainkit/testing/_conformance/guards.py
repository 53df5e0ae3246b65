"""The leak guards every conformance test that runs Ray uses."""

import pytest

GUARDS = pytest.mark.usefixtures("ray_cluster", "no_leaked_env", "no_leaked_threads", "no_leaked_processes")
LOCAL_GUARDS = pytest.mark.usefixtures("no_leaked_env", "no_leaked_threads", "no_leaked_processes")
