import pytest

from trainkit.testing.fixtures import embedded_cluster


@pytest.fixture(scope="module")
def ray_cluster():
    """trainkit's cluster fixture as HFConfig's fit() starts it: its workers fork from a server with the framework imported."""
    from trainkit_hf import HFConfig

    with embedded_cluster(HFConfig) as ray:
        yield ray
