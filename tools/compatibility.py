"""Run the full test matrix and record it in docs/compatibility.md.

    python tools/compatibility.py                   # runs `nox -t matrix`, then writes the table
    python tools/compatibility.py --report R.json [--report RERUN.json]
                                                    # the table from earlier nox --report files; a
                                                    # session in a later file replaces the same one
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
SESSION = re.compile(r"^(?P<plugin>[\w-]+)\((?P<args>.*)\)$")
NOTES = """
## Notes

- `thirdparty` is the out-of-tree plugin in `tests/fixtures/thirdparty_plugin` (a NumPy all-reduce
  over sockets), installed from its own directory; its framework is NumPy.
- NumPy 2 is needed in practice: the latest pyarrow (26, a core dependency) refuses to import with
  NumPy 1.x ("pyarrow requires NumPy 2.0 or newer") although its metadata does not say so, so pip
  happily installs the pair. The first matrix run caught it with NumPy 1.24.4.
- LightGBM before 4.4 cannot take a Python list as a label under NumPy 2 (it calls
  `np.array(..., copy=False)`); pass arrays. Everything else passes on 4.0.0.
- torch 2.3.1 and 2.14.1 are PyPI's CUDA builds, tested on the CPU; 2.13.0 is the CPU build.
- XGBoost 3.3 and later need Python 3.12, so the latest release runs there. 2.0.3 and 2.1.4 sit
  on both sides of XGBoost's tracker change (ray#46476).
- Lightning rows install `lightning` and `pytorch-lightning` at the same version and test both
  import names. 2.2.5 fails before any trainkit code runs: its `lightning.fabric` imports
  `pkg_resources`, which current setuptools no longer ships; 2.4.0 is the oldest that works.
- JAX and jaxlib 0.11 and later need Python 3.12; 0.10.2 is the latest on 3.11.
- tf rows pin tf-keras to TensorFlow's minor version. TensorFlow before 2.18 needs NumPy 1.x,
  which pyarrow 26 refuses (see above): the 2.16 row pins pyarrow 25.0.1, the last that takes it;
  users of TensorFlow 2.16 or 2.17 need the same pin. Keras 3's multi-worker `model.fit` fails
  upstream (keras-team/keras#20585); both rows test tf-keras's `fit` and Keras 3 in `fit_loop`.
- hf rows install DeepSpeed (the latest also `datasets`). Transformers before 5.18 cannot resume a
  multi-process CPU run: it restores the optimizer with `map_location="cpu:0"`, which torch refuses
  ("don't know how to restore data location"); fixed upstream in 5.18, GPU runs unaffected, so that
  test skips on the oldest row. DeepSpeed's ZeRO-3 on CPUs now and then gathers garbage into
  one forward pass of one rank: often before 0.19 (0.16.9, 0.17.6, 0.18.0), once in 4 runs of
  0.19.0, never in 9 of 0.19.8; hence `deepspeed>=0.19`, and the test fingerprints the model by the
  median of three passes. Accelerate
  runs DeepSpeed (the Trainer's `deepspeed=` config, `DeepSpeedPlugin`) only on GPUs: those tests
  are GPU rows; plain `deepspeed.initialize` runs ZeRO 1-3 and offload on CPUs in every row.
- `core` rows include the tracking tests (a real MLflow server, TensorBoard's reader).
- GPU rows (`nox -s gpu`: NCCL, FSDP, Lightning's FSDP and DeepSpeed) have not run: no GPU machine
  has been available yet.
"""


def rows(report: dict) -> list[tuple[str, str, str, str]]:
    out = []
    for session in report["sessions"]:
        match = SESSION.match(session["name"])
        if match:
            args = dict(part.split("=", 1) for part in match["args"].split(", "))
            python = args.pop("python")
            versions = ", ".join(f"{k} {v}" for k, v in args.items())
            plugin, versions = match["plugin"], versions
        else:
            plugin, versions, python = session["name"], "all plugins, pinned versions", "3.11"
        out.append((plugin, versions, python, {"success": "pass"}.get(session["result"], session["result"])))
    return out


def table(report: dict) -> str:
    lines = [
        "# Compatibility",
        "",
        "The full test matrix (`nox -t matrix`): every row runs the package's whole test suite in its own",
        "environment holding only that package, its framework at the version shown, and the test tools.",
        "Rows come from each package's `[tool.trainkit] test-matrix`; `python tools/compatibility.py`",
        "reruns them and rewrites this page.",
        "",
        f"Last run: {datetime.date.today()}, {platform.machine()}, {platform.system()}, 2 CPU cores, no GPU.",
        "",
        "| package | framework versions | Python | result |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {p} | {v} | {py} | {r} |" for p, v, py, r in rows(report)]
    return "\n".join(lines) + "\n" + NOTES


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", action="append", help="nox --report JSON files to use instead of running")
    args = parser.parse_args()
    paths = [Path(p) for p in args.report or [ROOT / ".nox" / "matrix-report.json"]]
    if not args.report:
        subprocess.run([sys.executable, "-m", "nox", "-t", "matrix", "--report", str(paths[0])], cwd=ROOT)
    sessions: dict[str, dict] = {}
    for path in paths:
        sessions.update((s["name"], s) for s in json.loads(path.read_text())["sessions"])
    ordered = sorted(sessions.values(), key=lambda s: s["name"] == "together")  # the all-in-one row last
    (ROOT / "docs" / "compatibility.md").write_text(table({"sessions": ordered}))
    print((ROOT / "docs" / "compatibility.md").read_text())


if __name__ == "__main__":
    main()
