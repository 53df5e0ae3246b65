import pytest

from trainkit.testing.fixtures import embedded_cluster


@pytest.fixture(scope="module")
def ray_cluster():
    """trainkit's cluster fixture as TorchConfig's fit() starts it: its workers fork from a server with the framework imported."""
    from trainkit_torch import TorchConfig

    with embedded_cluster(TorchConfig) as ray:
        yield ray
