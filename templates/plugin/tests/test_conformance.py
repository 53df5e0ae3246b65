"""trainkit-myframework against trainkit.testing's conformance suites, on 2 real workers."""

import trainkit
from trainkit.testing import NOT_PROVIDED, BackendConformance, CheckpointConformance

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


def journey(config: dict) -> None:
    """One small, deterministic run as your users write it, through your plugin's helpers (the kit
    runs it at 0-3 workers, failing, retried, resumed, twice at once: docs/extending.md)."""
    import myframework  # TODO: your framework's model, optimizer, data helper and checkpointing

    model = myframework.Model(seed=config["seed"])  # build the model and its optimizer
    checkpoint = trainkit.get_checkpoint()
    if checkpoint is not None:  # restore the weights AND the optimizer's state
        model.load_state(MyFrameworkCheckpointIO().load(checkpoint))
    rows = trainkit.shard(list(config["rows"]))  # or your data helper
    while model.step < config["steps"]:
        loss = model.train_step(rows)
        MyFrameworkCheckpointIO().report({"step": model.step, "loss": loss, "rows": rows}, model.state())


class TestMyFrameworkBackend(BackendConformance):
    backend_config = MyFrameworkConfig()
    framework_modules = ("myframework",)  # TODO: your framework's top-level modules
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    journey = staticmethod(journey)
    # Each hook is probed; one left unset fails with the line to add. Where the plugin truly has no
    # such helper, opt out with the reason: report_callback = NOT_PROVIDED("why") (docs/extending.md).
    shard = staticmethod(trainkit.shard)  # TODO: or your data helper: the rows of `rows` this rank trains on
    report_callback = NOT_PROVIDED("TODO: your report callback, or why the plugin has none")


class TestMyFrameworkCheckpointIO(CheckpointConformance):
    checkpoint_io = MyFrameworkCheckpointIO()

    def make_state(self, seed):
        return {"weights": [1.0, 2.0, 3.0 + seed], "step": 7}  # TODO: a state of your framework (seeds differ)

    def assert_same(self, loaded, saved):
        assert loaded == saved  # TODO: compare the framework's way

    # the plugin's resume helper: given a checkpoint, the state it restores (TODO: yours)
    resume = staticmethod(MyFrameworkCheckpointIO().load)
