"""A driver the reliability tests can kill: ``_driver.py STORAGE NAME STEPS OPTIONS_JSON``.

Each step rank 0 checkpoints a file holding the step (unless ``"checkpoint": false``: metrics
only); the function resumes from it. Prints one JSON line: the first step of the last attempt and
the final metrics.
"""

import json
import os
import signal
import sys
import time

import trainkit
from trainkit.testing.steps import report_step, resume_step


def train_fn(config):
    ctx = trainkit.get_context()
    start = resume_step()
    for step in range(start, config["steps"]):
        metrics = {"step": step, "start": start, "attempt": ctx.get_attempt(), "t": time.time()}
        if config["checkpoint"]:
            report_step(step, metrics, rank0_only=True, files={"blob.bin": os.urandom(64 << 10)},
                        checkpoint_dir_name=config["checkpoint_dir_name"])
        else:
            trainkit.report(metrics)
        time.sleep(config["sleep"])
    return start


if __name__ == "__main__":
    storage, name, steps, options = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    if options.get("own_sigterm_handler"):  # the user's handler: fit() leaves it in force
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(options["own_sigterm_handler"]))
    result = trainkit.DataParallelTrainer(
        train_fn, train_loop_config={"steps": steps, "sleep": options.get("sleep", 0.05),
                                     "checkpoint": options.get("checkpoint", True),
                                     "checkpoint_dir_name": options.get("checkpoint_dir_name")},
        scaling_config=trainkit.ScalingConfig(num_workers=options.get("num_workers", 2),
                                              resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(
            name=name, storage_path=storage,
            checkpoint_config=trainkit.CheckpointConfig(num_to_keep=options.get("num_to_keep")),
            failure_config=trainkit.FailureConfig(max_failures=options.get("max_failures", 0)))).fit()
    print(json.dumps({"start": result.return_value, "metrics": result.metrics}))
