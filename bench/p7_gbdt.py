"""P7: distributed GBDT on 2 trainkit workers vs the framework's own single process, same data.

    python bench/p7_gbdt.py [--rows 200000] [--rounds 3]

Both sides are whole processes that load the same generated data set (make_classification, saved
once) and train the same model: the single process with 2 threads (the whole machine), trainkit with
2 workers x 1 thread on half the rows each. The fixed cost of a trainkit run (start and stop of a
2-worker run that does nothing) is measured in the same run.

Target (TARGETS.md): trainkit wall <= 1.2 x single process + that fixed cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import rounds, save, summarize, timed  # noqa: E402

BOOST_ROUNDS = 50


def train(framework: str, x, y, threads: int, network: dict | None = None):
    if framework == "xgboost":
        import xgboost

        params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 6, "nthread": threads}
        return xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=BOOST_ROUNDS)
    import lightgbm

    params = {"objective": "binary", "num_leaves": 63, "num_threads": threads, "verbose": -1,
              **({"tree_learner": "data", "pre_partition": True, **network} if network else {})}
    return lightgbm.train(params, lightgbm.Dataset(x, label=y), num_boost_round=BOOST_ROUNDS)


def load(path: str):
    import numpy as np

    with np.load(path) as data:
        return data["x"], data["y"]


def worker_fn(config):
    import trainkit

    x, y = load(config["data"])
    network = None
    if config["framework"] == "lightgbm":
        from trainkit_lightgbm import get_network_params

        network = get_network_params()
    start = time.perf_counter()
    train(config["framework"], trainkit.shard(x), trainkit.shard(y), threads=1, network=network)
    trainkit.report({"train_s": time.perf_counter() - start})


def run_trainkit(framework: str | None, data: str) -> None:
    import trainkit

    run = trainkit.RunConfig(storage_path=tempfile.mkdtemp(prefix="p7-"), verbose=0)
    scaling = trainkit.ScalingConfig(num_workers=2)
    if framework is None:  # the fixed cost: start and stop a 2-worker run that does nothing
        trainkit.DataParallelTrainer(lambda: trainkit.report({"ok": 1}), scaling_config=scaling, run_config=run).fit()
        return
    trainkit.Trainer(worker_fn, backend=framework, train_loop_config={"framework": framework, "data": data},
                     scaling_config=scaling, run_config=run).fit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single", nargs=2, metavar=("FRAMEWORK", "DATA"), help=argparse.SUPPRESS)
    parser.add_argument("--trainkit", nargs="+", metavar="FRAMEWORK DATA", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        train(args.single[0], *load(args.single[1]), threads=2)
        return
    if args.trainkit:
        run_trainkit(None if args.trainkit[0] == "none" else args.trainkit[0], args.trainkit[-1])
        return

    import numpy as np
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=args.rows, n_features=40, n_informative=20, random_state=0)
    data = os.path.join(tempfile.mkdtemp(prefix="p7-data-"), "data.npz")
    np.savez(data, x=x.astype(np.float32), y=y)
    me, py = str(Path(__file__)), sys.executable
    env = {"OMP_NUM_THREADS": "2"}
    fixed = summarize(rounds({"trainkit empty run": lambda: timed([py, me, "--trainkit", "none", data], env)},
                             args.rounds)["trainkit empty run"])
    payload = {"rows": args.rows, "boost_rounds": BOOST_ROUNDS, "fixed_cost_s": fixed}
    for framework in ("xgboost", "lightgbm"):
        samples = rounds({"single": lambda: timed([py, me, "--single", framework, data], env),
                          "trainkit": lambda: timed([py, me, "--trainkit", framework, data], env)}, args.rounds)
        single, tk = summarize(samples["single"]), summarize(samples["trainkit"])
        bound = 1.2 * single["median"] + fixed["median"]
        print(f"P7 {framework}: single process {single['median']:.2f} s ({single['min']:.2f}-{single['max']:.2f}), "
              f"trainkit 2 workers {tk['median']:.2f} s ({tk['min']:.2f}-{tk['max']:.2f}); "
              f"ratio {tk['median'] / single['median']:.2f}x; target <= 1.2 x single + fixed "
              f"{fixed['median']:.2f} s = {bound:.2f} s: {'met' if tk['median'] <= bound else 'NOT met'}")
        payload[framework] = {"single": single, "trainkit": tk, "bound_s": bound}
    print(f"results: {save('p7', payload)}")


if __name__ == "__main__":
    main()
