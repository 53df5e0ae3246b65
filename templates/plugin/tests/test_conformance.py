"""trainkit-myframework against trainkit.testing's conformance suites, on 2 real workers."""

from trainkit.testing import BackendConformance, CheckpointConformance

from trainkit_myframework import MyFrameworkCheckpointIO, MyFrameworkConfig


# The three functions run on the workers and must ask the framework itself, never trainkit.
def framework_rank() -> int:
    import myframework  # TODO: this worker's rank as the framework reports it

    return myframework.rank()


def all_gather(value: float) -> list[float]:
    import myframework  # TODO: every rank's value, in rank order, with the framework's own collective

    return [float(v) for v in myframework.all_gather(value)]


def is_initialized() -> bool:
    import myframework  # TODO: whether the framework's communication is still set up in this process

    return myframework.is_initialized()


class TestMyFrameworkBackend(BackendConformance):
    backend_config = MyFrameworkConfig()
    framework_modules = ("myframework",)  # TODO: your framework's top-level modules
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    # Optional, each probed when set (docs/extending.md): the plugin's data helper and report callback.
    # shard = staticmethod(lambda rows: list(my_data_helper(rows)))       # the rows this rank trains on
    # report_callback = staticmethod(lambda metrics: MyReportCallback().on_step_end(metrics))


class TestMyFrameworkCheckpointIO(CheckpointConformance):
    checkpoint_io = MyFrameworkCheckpointIO()

    def make_state(self, seed):
        return {"weights": [1.0, 2.0, 3.0 + seed], "step": 7}  # TODO: a state of your framework (seeds differ)

    def assert_same(self, loaded, saved):
        assert loaded == saved  # TODO: compare the framework's way

    # Optional: the plugin's resume helper, given a checkpoint, returns the state it restores.
    # resume = staticmethod(lambda checkpoint: my_resume_helper(checkpoint))
