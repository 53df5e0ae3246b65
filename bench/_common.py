"""Shared bench plumbing: timed subprocess runs, alternating A/B rounds, medians, JSON results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def timed(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> float:
    """Wall seconds of a whole process; raises with its output if it fails."""
    start = time.perf_counter()
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return elapsed


def run_alone(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``script`` in a fresh interpreter (so no framework inherits another's Ray); its stdout."""
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=True, timeout=timeout,
                         env={**os.environ, "RAY_TRAIN_V2_ENABLED": "1"})
    return out.stdout


def rounds(variants: dict[str, callable], n: int) -> dict[str, list[float]]:
    """Run every variant once per round, alternating order, n rounds."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(n):
        for name in names if i % 2 == 0 else reversed(names):
            samples[name].append(variants[name]())
            print(f"  round {i + 1}/{n} {name}: {samples[name][-1]:.2f}", file=sys.stderr, flush=True)
    return samples


def summarize(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {"python": platform.python_version(), "machine": f"{platform.machine()} {os.cpu_count()} cores"}
    for dist in ("trainkit", "ray", "torch"):
        try:
            found[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return found


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y-%m-%d')}-{name}.json"
    path.write_text(json.dumps({"versions": versions(), **payload}, indent=1))
    return path
