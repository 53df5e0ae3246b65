"""trainkit-myframework against trainkit.testing's conformance suites, on 2 real workers."""

from trainkit.testing import BackendConformance, CheckpointConformance

from trainkit_myframework import MyFrameworkCheckpointIO, MyFrameworkConfig


def all_reduce_sum(value: float) -> float:
    import myframework  # TODO: sum value over all ranks with the framework's collective

    return float(myframework.all_reduce(value))


class TestMyFrameworkBackend(BackendConformance):
    backend_config = MyFrameworkConfig()
    framework_modules = ("myframework",)  # TODO: your framework's top-level modules
    all_reduce_sum = staticmethod(all_reduce_sum)


class TestMyFrameworkCheckpointIO(CheckpointConformance):
    checkpoint_io = MyFrameworkCheckpointIO()

    def make_state(self):
        return {"weights": [1.0, 2.0, 3.0], "step": 7}  # TODO: a state of your framework

    def assert_same(self, loaded, saved):
        assert loaded == saved  # TODO: compare the framework's way
