"""``fit_loop``: a custom training loop with ``model.fit``'s shape, for Keras 3 across workers
(where Keras 3's own ``fit`` fails: keras-team/keras#20585). Works for tf-keras models too."""

from __future__ import annotations

from typing import Any, Sequence

from trainkit.validation import check_int

from trainkit_tf.checkpoint import keras_module


def fit_loop(model: Any, dataset: Any, *, epochs: int, steps_per_epoch: int, initial_epoch: int = 0,
             callbacks: Sequence[Any] = ()) -> dict[str, list[float]]:
    """Train a compiled model on ``(x, y)`` batches for ``epochs - initial_epoch`` epochs of
    ``steps_per_epoch`` steps, in the strategy the model was built under: each step runs in
    ``strategy.run``, so gradients are all-reduced across workers and replicas stay identical.
    The loss is ``model.compile``'s, averaged over the global batch (plus the layers' losses);
    ``callbacks`` (e.g. ``ReportCallback``) get ``loss`` in their logs. Returns ``{"loss": [...]}``
    per epoch. ``dataset`` must not run out (``.repeat()``); every worker runs the same steps.

    Example::

        with strategy.scope():
            model = keras.Sequential([...])
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
        fit_loop(model, dataset.repeat(), epochs=5, steps_per_epoch=20, callbacks=[ReportCallback()])
    """
    import tensorflow as tf

    for field, value, least in (("epochs", epochs, 1), ("steps_per_epoch", steps_per_epoch, 1),
                                ("initial_epoch", initial_epoch, 0)):
        check_int(field, value, least)
    if getattr(model, "optimizer", None) is None or getattr(model, "loss", None) is None:
        raise ValueError("fit_loop needs a compiled model: model.compile(optimizer=..., loss=...) "
                         "under strategy.scope()")
    strategy, optimizer = model.distribute_strategy, model.optimizer
    loss = keras_module(model).losses.get(model.loss)
    per_example = loss.call if hasattr(loss, "call") else loss  # a Loss's call() does not reduce
    if not getattr(optimizer, "built", True):
        with strategy.scope():
            optimizer.build(model.trainable_variables)

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            value = tf.nn.compute_average_loss(per_example(y, model(x, training=True)))
            if model.losses:
                value += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        gradients = tape.gradient(value, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return value

    @tf.function
    def train_step(iterator: Any) -> Any:
        return strategy.reduce("SUM", strategy.run(replica_step, args=next(iterator)), axis=None)

    def call(hook: str, *args: Any) -> None:
        for callback in callbacks:
            getattr(callback, f"on_{hook}")(*args)

    for callback in callbacks:
        callback.set_model(model)
        callback.set_params({"epochs": epochs, "steps": steps_per_epoch, "verbose": 0})
    iterator, history = iter(strategy.experimental_distribute_dataset(dataset)), {"loss": []}
    call("train_begin", None)
    for epoch in range(initial_epoch, epochs):
        call("epoch_begin", epoch, None)
        losses = []
        for step in range(steps_per_epoch):
            call("train_batch_begin", step, None)
            losses.append(float(train_step(iterator)))
            call("train_batch_end", step, {"loss": losses[-1]})
        history["loss"].append(sum(losses) / len(losses))
        call("epoch_end", epoch, {"loss": history["loss"][-1]})
    call("train_end", {"loss": history["loss"][-1]} if history["loss"] else None)
    return history
