"""P11: ``trainkit launch`` against torchrun on the same unchanged torchrun script (bench/_p11_job.py,
2 ranks of gloo DDP), in alternating rounds:

- cold start: the whole launcher process, and its launch to the first rank's first line of output;
- restart: rank 1 exits 1 in the first attempt's epoch 1 (``--max-restarts 1`` / ``--max-failures 1``);
  the figure is the failure (the rank's last event before it exits) to the next attempt's first line;
- trainkit's phase table (from the run's run_state.json) and each side's whole-tree peak memory, of a
  cold run and of a restarted one (where trainkit keeps the next attempt's workers ready).

    python bench/p11_launch.py [--rounds 5] [--no-memory]

Targets (issue 31): cold start <= 1.2x torchrun, restart <= torchrun's.
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

JOB = str(Path(__file__).parent / "_p11_job.py")
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
SIDES = {"torchrun": {}, "trainkit": {}, "trainkit cold": {"TRAINKIT_SPARE_WORKERS": "0"},
         "trainkit unforked": {"TRAINKIT_FORK_WORKERS": "0"}}  # ranks and scripts as fresh interpreters
PHASES = ("ray_start", "placement", "actors", "setup", "backend", "launch")


def script(name: str) -> str:
    """The console script users run (torchrun, trainkit), from this interpreter's environment."""
    return os.path.join(os.path.dirname(sys.executable), name)


def command(side: str, out: str, crash: bool) -> list[str]:
    job = [JOB, out, *(["--crash"] if crash else [])]
    if side == "torchrun":
        return [script("torchrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", str(int(crash)), *job]
    return [script("trainkit"), "launch", "--nproc", "2", "--max-failures", str(int(crash)),
            "--storage-path", os.path.join(out, "runs"), "--name", "p11", *job]


def events(out: str) -> list[dict]:
    return [json.loads(line) for line in Path(out, "events.jsonl").read_text().splitlines()]


def first(found: list[dict], name: str, restart: int) -> float:
    return min(e["t"] for e in found if e["name"] == name and e["restart"] == restart)


def phases(out: str, launched: float, first_line: float) -> dict[str, float]:
    """trainkit's start, phase by phase (they add up to launch -> first line): the attempt's own
    start profile (run_state.json), the rest is the launcher's interpreter and imports, its run
    directory, and the script's interpreter up to its first line."""
    profile = json.loads(Path(out, "runs", "p11", "run_state.json").read_text())["start_profile"]
    table = {phase: profile.get(phase, 0.0) for phase in PHASES}
    return {"launcher (interpreter, imports, run directory) and the script's interpreter":
            first_line - launched - sum(table.values()), **table}


def restart_phases(out: str, crashed: float, restarted: float) -> dict[str, float]:
    """trainkit's restart, phase by phase (they add up to the crash -> the next first line)."""
    state = json.loads(Path(out, "runs", "p11", "run_state.json").read_text())
    table = {"the rank's exit, the driver told, the attempt stopped": state["failures"][0]["time"] - crashed,
             **{phase: state["start_profile"].get(phase, 0.0) for phase in PHASES}}  # the restart's profile
    table["the rest (the script's interpreter up to its first line)"] = restarted - crashed - sum(table.values())
    return table


def variant(side: str, crash: bool, figures: dict):
    def run() -> float:
        out = tempfile.mkdtemp(prefix="p11-")
        try:
            launched = time.time()
            elapsed = timed(command(side, out, crash), env={**ENV, **SIDES[side]})
            found = events(out)
            if crash:
                crashed, restarted = first(found, "crash", 0), first(found, "first_line", 1)
                if side != "torchrun":
                    figures.setdefault(side, {}).setdefault("restart phases", []).append(
                        restart_phases(out, crashed, restarted))
                return restarted - crashed
            first_line = first(found, "first_line", 0)
            figures.setdefault(side, {}).setdefault("first line", []).append(first_line - launched)
            if side != "torchrun":
                figures[side].setdefault("phases", []).append(phases(out, launched, first_line))
            return elapsed
        finally:
            shutil.rmtree(out, ignore_errors=True)

    return run


def role(cmdline: str, is_root: bool) -> str:
    if is_root:
        return "launcher"
    if "_p11_job.py" in cmdline and not any(f"bin/{name} " in cmdline for name in ("torchrun", "trainkit")):
        return "rank"
    if cmdline.startswith("ray::"):
        return "ray worker"
    return "other"


def memory(side: str, crash: bool) -> dict:
    """Whole-tree peak memory of one run; torch's own abort at a rank's exit (SIGABRT: once in about
    15 runs here, under either launcher) is retried once."""
    for tries_left in (1, 0):
        out = tempfile.mkdtemp(prefix="p11-mem-")
        try:
            return peak_memory(command(side, out, crash), role, env={**ENV, **SIDES[side]})
        except RuntimeError:
            if not tries_left:
                raise
        finally:
            shutil.rmtree(out, ignore_errors=True)


def ratio_line(name: str, samples: dict[str, list[float]], side: str, target: str) -> dict:
    per_round = [s / t for s, t in zip(samples[side], samples["torchrun"])]
    calmest = min(range(len(per_round)), key=lambda i: samples["torchrun"][i] + samples[side][i])
    found = {"of medians": statistics.median(samples[side]) / statistics.median(samples["torchrun"]),
             "median round": statistics.median(per_round), "calmest round": per_round[calmest], "per round": per_round}
    print(f"P11 {name} {side}/torchrun = {found['of medians']:.2f} of the medians, {found['median round']:.2f} in the "
          f"median round, {found['calmest round']:.2f} in the calmest ({target}); per round "
          f"{' '.join(f'{r:.2f}' for r in per_round)}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm-cluster side (`trainkit up`)")
    args = parser.parse_args()
    figures: dict[str, dict] = {}
    warm_memory = {}
    if args.no_warm:
        cold = rounds({side: variant(side, False, figures) for side in SIDES}, args.rounds)
    else:  # "trainkit warm": `trainkit launch` attached to a warm cluster started once, before the rounds
        with WarmCluster(ENV) as warm:
            warm_side = {k: v for k, v in warm.env.items() if k not in ENV}
            warm_memory["idle, just started"] = warm.idle_rss_mib()
            SIDES["trainkit warm"] = warm_side
            cold = rounds({side: variant(side, False, figures) for side in SIDES}, args.rounds)
            warm_memory["idle, after the rounds"] = warm.idle_rss_mib()
        del SIDES["trainkit warm"]  # the memory runs below are of the sides without it
        for when, found in warm_memory.items():
            print(f"P11 warm cluster memory, {when}: RSS {found['total_mib']:.0f} MiB in {found['processes']} processes")
    restart = rounds({side: variant(side, True, figures) for side in ("torchrun", "trainkit")}, args.rounds)
    for name, samples in (("cold start", cold), ("restart", restart)):
        for side, s in samples.items():
            st = summarize(s)
            print(f"P11 {name} {side:13s} median {st['median']:.2f} s (min {st['min']:.2f}, max {st['max']:.2f}, n={st['n']})")
    for side, found in figures.items():
        print(f"P11 launch -> first line {side:13s} median {statistics.median(found['first line']):.2f} s")
    ratios = {"cold start": ratio_line("cold start", cold, "trainkit", "target <= 1.2"),
              "cold start, warm workers off": ratio_line("cold start", cold, "trainkit cold", "report"),
              "cold start, not forked": ratio_line("cold start", cold, "trainkit unforked", "report"),
              **({"cold start, warm cluster": ratio_line("cold start", cold, "trainkit warm", "target <= 0.5")}
                 if "trainkit warm" in cold else {}),
              "restart": ratio_line("restart", restart, "trainkit", "target <= 1.0")}
    table = {}
    for name, what in (("phases", "launch -> first line"), ("restart phases", "restart: crash -> first line")):
        table[name] = {phase: statistics.median(p[phase] for p in figures["trainkit"][name])
                       for phase in figures["trainkit"][name][0]}
        print(f"P11 trainkit {what}, median seconds per phase:")
        for phase, seconds in table[name].items():
            print(f"  {phase:76s} {seconds:6.2f}")
    results = {"cold": cold, "restart": restart, "ratios": ratios, "phases": table, "figures": figures,
               "warm_cluster_memory": warm_memory}
    save("p11", results)
    mem = {} if args.no_memory else {**{side: memory(side, False) for side in SIDES},
                                     **{f"{side} restart": memory(side, True) for side in ("torchrun", "trainkit")}}
    for side, found in mem.items():
        rss = found["peak_rss_mib"]
        print(f"P11 memory {side:16s} launcher {rss['launcher'][0]:.0f} MiB, ranks {rss.get('rank', [])} MiB, "
              f"Ray workers {rss.get('ray worker', [])} MiB, other {sum(rss.get('other', [])):.0f} MiB in "
              f"{len(rss.get('other', []))}, whole tree peak PSS {found['peak_total_pss_mib']:.0f} MiB")
    print(f"results: {save('p11', {**results, 'memory': mem})}")


if __name__ == "__main__":
    main()
