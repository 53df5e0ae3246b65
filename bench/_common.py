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


AFTER_EACH: list = []  # called after every timed process, untimed (a warm cluster settling: WarmCluster)


def timed(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> float:
    """Wall seconds of a whole process; raises with its output if it fails."""
    start = time.perf_counter()
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    for settle in AFTER_EACH:
        settle()
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


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/{'status' if field == 'VmHWM' else 'smaps_rollup'}") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def peak_memory(cmd: list[str], role, env: dict[str, str] | None = None, timeout: float = 600) -> dict:
    """Run ``cmd``, sampling its process tree every 50 ms (Linux): the peak RSS (VmHWM) of each
    process, in MiB, grouped by ``role(cmdline, is_root)`` ("driver", "worker" or "other"), and the
    tree's peak total PSS (shared pages, e.g. torch's libraries, counted once)."""
    import psutil

    import tempfile

    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=errors)
    root, deadline = psutil.Process(proc.pid), time.monotonic() + timeout
    peaks: dict[int, tuple[str, int]] = {}
    total_pss = 0
    while proc.poll() is None and time.monotonic() < deadline:
        pss = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                kind, hwm = peaks.get(p.pid, ("other", 0))
                cmdline = " ".join(p.cmdline())  # the latest: Ray workers rename themselves
                kind = role(cmdline, p.pid == root.pid) if cmdline else kind
                peaks[p.pid] = (kind, max(hwm, _status_kib(p.pid, "VmHWM")))  # a zombie reads 0 and no cmdline
                pss += _status_kib(p.pid, "Pss")
            except (psutil.Error, OSError):
                continue
        total_pss = max(total_pss, pss)
        time.sleep(0.05)
    if proc.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
        errors.seek(0)
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{errors.read()[-4000:].decode()}")
    by_role: dict[str, list[float]] = {}
    for kind, kib in peaks.values():
        by_role.setdefault(kind, []).append(round(kib / 1024, 1))
    return {"peak_rss_mib": {kind: sorted(v, reverse=True) for kind, v in by_role.items()},
            "peak_total_pss_mib": round(total_pss / 1024, 1)}


class WarmCluster:
    """``trainkit up`` for a bench's "trainkit warm" side, in a TMPDIR of its own (so only the runs
    given ``env`` attach to it; the other sides start Ray as before), ``trainkit down`` at the end."""

    def __init__(self, base_env: dict[str, str]):
        import tempfile

        self.tmp = tempfile.mkdtemp(prefix="tkw", dir="/tmp")  # short: Ray's socket paths live under it
        self.env = {**base_env, "TMPDIR": self.tmp}

    def __enter__(self) -> "WarmCluster":
        out = subprocess.run([sys.executable, "-m", "trainkit.cli", "up", "--idle-timeout", "0", "--json"],
                             env={**os.environ, **self.env}, capture_output=True, text=True, timeout=300)
        if out.returncode:
            raise RuntimeError(f"trainkit up failed: {out.stderr[-2000:]}")
        self.record = json.loads(out.stdout)
        AFTER_EACH.append(self.settle)
        return self

    def idle_rss_mib(self, settle_s: float = 20.0) -> dict:
        """RSS of every process of the idle warm cluster (its keeper and all it started), after
        ``settle_s`` for its idle workers' prewarm imports to end."""
        import psutil

        time.sleep(settle_s)
        keeper = psutil.Process(self.record["keeper_pid"])
        rss = {}
        for proc in [keeper, *keeper.children(recursive=True)]:
            try:
                rss[f"{proc.pid} {proc.name()} {' '.join(proc.cmdline()[:1])[:40]}"] = proc.memory_info().rss / 2**20
            except psutil.Error:
                pass
        return {"total_mib": sum(rss.values()), "processes": len(rss), "per_process_mib": rss}

    def settle(self, quiet_s: float = 2.0, timeout_s: float = 60.0) -> None:
        """Wait until the warm cluster has its spare workers and its spare driver again and its
        processes used no CPU for ``quiet_s`` (the new spares imported their framework), so that the
        next side runs on a quiet machine too. Its keeper starts new spares up to a second after a
        run took them: hence 2 s."""
        import psutil

        keeper = psutil.Process(self.record["keeper_pid"])
        deadline = time.monotonic() + timeout_s

        def spares() -> int:
            found = 0
            for proc in keeper.children(recursive=True):
                try:
                    found += proc.cmdline()[:1] == ["ray::Worker"]
                except psutil.Error:
                    pass
            return found

        driver = os.path.join(self.tmp, f"trainkit-{os.getuid()}", "driver.sock")  # listening: loaded
        while (spares() < self.record.get("spares", 0) or not os.path.exists(driver)) and time.monotonic() < deadline:
            time.sleep(0.1)

        def cpu() -> float:
            total = 0.0
            for proc in [keeper, *keeper.children(recursive=True)]:
                try:
                    times = proc.cpu_times()
                    total += times.user + times.system
                except psutil.Error:
                    pass
            return total

        before = cpu()
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = cpu()
            if now - before < 0.05 * quiet_s:
                return
            before = now

    def __exit__(self, *exc) -> None:
        import shutil

        AFTER_EACH.remove(self.settle)

        subprocess.run([sys.executable, "-m", "trainkit.cli", "down"], env={**os.environ, **self.env},
                       capture_output=True, timeout=300)
        shutil.rmtree(self.tmp, ignore_errors=True)
