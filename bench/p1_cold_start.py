"""P1: cold start to result of the tiny 2-worker DDP job, whole process: trainkit vs torchrun vs Ray Train.

    python bench/p1_cold_start.py [--rounds 3] [--no-raytrain] [--no-memory]

Target (TARGETS.md): trainkit <= 1.3x torchrun and <= 0.3x Ray Train. Also prints where trainkit's
time goes (the start path, from the run's own start profile) and each side's peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import WarmCluster, peak_memory, rounds, save, summarize, timed  # noqa: E402

JOB = str(Path(__file__).parent / "_p1_job.py")
ENV = {"OMP_NUM_THREADS": "1", "RAY_TRAIN_V2_ENABLED": "1"}
# "trainkit cold": the same job with warm workers off, to show what prestarting the next fit's workers
# costs a single fit (the driver starts them as its group stops, just before it exits)
# "trainkit unforked": the embedded cluster's workers start as fresh interpreters, not forked from its
# fork server (``TRAINKIT_FORK_WORKERS=0``), to show what the fork server gives
SIDE_ENV = {"trainkit cold": {"TRAINKIT_SPARE_WORKERS": "0"}, "trainkit unforked": {"TRAINKIT_FORK_WORKERS": "0"}}
PHASES = ("ray_start", "placement", "actors", "setup", "backend", "launch", "first_report")


def command(mode: str, out: str) -> list[str]:
    if mode == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", JOB, mode, out]
    return [sys.executable, JOB, mode.split()[0], out]


def breakdown(launched: float, ended: float, profile: dict) -> dict[str, float]:
    """Seconds per phase of one trainkit run, in order; they add up to its wall time."""
    fit = profile["start_profile"]
    phases = {"interpreter + import torch (the user's script)": profile["torch_imported"] - launched,
              "import trainkit, trainkit_torch": profile["imported"] - profile["torch_imported"],
              **{phase: fit.get(phase, 0.0) for phase in PHASES}}
    phases["rest of fit (+ import ray unless handed off)"] = profile["fitted"] - profile["imported"] - sum(fit.get(p, 0.0) for p in PHASES)
    phases["process exit"] = ended - profile["fitted"]
    phases["(framework import on the workers, overlapped)"] = fit.get("framework_import", 0.0)
    return phases


def variant(mode: str, profiles: dict[str, list[dict]]):
    def run() -> float:
        out = tempfile.mkdtemp(prefix=f"p1-{mode}-")
        try:
            launched = time.time()
            elapsed = timed(command(mode, out), env={**ENV, **SIDE_ENV.get(mode, {})})
            if mode.startswith("trainkit"):
                profiles.setdefault(mode, []).append(breakdown(launched, launched + elapsed, json.load(open(os.path.join(out, "profile.json")))))
            return elapsed
        finally:
            shutil.rmtree(out, ignore_errors=True)

    return run


def role(cmdline: str, is_root: bool) -> str:
    """Which process is what: the launcher/driver, a training worker, or Ray's own machinery."""
    if is_root:
        return "driver"
    if "_p1_job.py" in cmdline or cmdline.startswith(("ray::Worker", "ray::RayTrainWorker")):
        return "worker"
    return "other"


def memory(mode: str) -> dict:
    out = tempfile.mkdtemp(prefix=f"p1-mem-{mode}-")
    try:
        return peak_memory(command(mode, out), role, env={**ENV, **SIDE_ENV.get(mode, {})})
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-raytrain", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm-cluster side (`trainkit up`)")
    args = parser.parse_args()
    modes = ["torchrun", "trainkit", "trainkit cold", "trainkit unforked"] + ([] if args.no_raytrain else ["raytrain"])
    profiles: dict[str, list[dict]] = {}
    warm_memory = {}
    if args.no_warm:
        samples = rounds({m: variant(m, profiles) for m in modes}, args.rounds)
    else:  # "trainkit warm": the same fresh process, attached to a warm cluster started once, before the rounds
        with WarmCluster(ENV) as warm:
            SIDE_ENV["trainkit warm"] = {k: v for k, v in warm.env.items() if k not in ENV}
            warm_memory["idle, just started"] = warm.idle_rss_mib()
            modes.insert(1, "trainkit warm")
            samples = rounds({m: variant(m, profiles) for m in modes}, args.rounds)
            warm_memory["idle, after the rounds"] = warm.idle_rss_mib()
        for when, found in warm_memory.items():
            print(f"P1 warm cluster memory, {when}: RSS {found['total_mib']:.0f} MiB in {found['processes']} processes")
    stats = {m: summarize(s) for m, s in samples.items()}
    tk, tr = stats["trainkit"]["median"], stats["torchrun"]["median"]
    for m, s in stats.items():
        print(f"P1 {m:13s} median {s['median']:.2f} s (min {s['min']:.2f}, max {s['max']:.2f}, n={s['n']})")
    per_round = [k / t for k, t in zip(samples["trainkit"], samples["torchrun"])]
    calmest = min(range(args.rounds), key=lambda i: samples["torchrun"][i] + samples["trainkit"][i])
    ratios = {"trainkit/torchrun": tk / tr, "median round": statistics.median(per_round),
              "calmest round": per_round[calmest], "per round": per_round,
              "trainkit cold/torchrun": stats["trainkit cold"]["median"] / tr,
              "trainkit unforked/torchrun": stats["trainkit unforked"]["median"] / tr}
    print(f"P1 trainkit/torchrun = {tk / tr:.2f} of the medians; {ratios['median round']:.2f} in the median round "
          f"(target <= 1.25), {per_round[calmest]:.2f} in the calmest (target <= 1.15); per round "
          f"{' '.join(f'{r:.2f}' for r in per_round)}")
    print(f"P1 warm workers off (TRAINKIT_SPARE_WORKERS=0): {ratios['trainkit cold/torchrun']:.2f}x torchrun")
    print(f"P1 workers not forked (TRAINKIT_FORK_WORKERS=0): {ratios['trainkit unforked/torchrun']:.2f}x torchrun")
    if "trainkit warm" in samples:
        warm_rounds = [k / t for k, t in zip(samples["trainkit warm"], samples["torchrun"])]
        ratios["trainkit warm/torchrun"] = stats["trainkit warm"]["median"] / tr
        ratios["trainkit warm per round"] = warm_rounds
        print(f"P1 warm cluster (`trainkit up`): {ratios['trainkit warm/torchrun']:.2f}x torchrun of the medians, "
              f"{statistics.median(warm_rounds):.2f} in the median round (target <= 0.5); per round "
              f"{' '.join(f'{r:.2f}' for r in warm_rounds)}")
    if "raytrain" in stats:
        ratios["trainkit/raytrain"] = tk / stats["raytrain"]["median"]
        print(f"P1 trainkit/raytrain = {ratios['trainkit/raytrain']:.2f} (target <= 0.3)")
    start_path = {mode: {phase: statistics.median(p[phase] for p in runs) for phase in runs[0]}
                  for mode, runs in profiles.items()}
    for mode, phases in start_path.items():
        print(f"P1 {mode} start path (median seconds per phase):")
        for phase, seconds in phases.items():
            print(f"  {phase:48s} {seconds:6.2f}")
    mem = {} if args.no_memory else {m: memory(m) for m in modes if m != "trainkit warm"}
    for m, found in mem.items():
        rss = found["peak_rss_mib"]
        print(f"P1 memory {m:13s} driver {rss['driver'][0]:.0f} MiB, workers {rss.get('worker', [])} MiB, "
              f"other processes {sum(rss.get('other', [])):.0f} MiB in {len(rss.get('other', []))}, "
              f"whole tree peak PSS {found['peak_total_pss_mib']:.0f} MiB")
    print(f"results: {save('p1', {'stats': stats, 'ratios': ratios, 'samples': samples, 'start_path': start_path, 'memory': mem, 'warm_cluster_memory': warm_memory})}")


if __name__ == "__main__":
    main()
