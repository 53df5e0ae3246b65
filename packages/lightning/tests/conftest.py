import pytest

from trainkit.testing.fixtures import embedded_cluster


@pytest.fixture(scope="module")
def ray_cluster():
    """trainkit's cluster fixture as LightningConfig's fit() starts it: its workers fork from a server with the framework imported."""
    from trainkit_lightning import LightningConfig

    with embedded_cluster(LightningConfig) as ray:
        yield ray
