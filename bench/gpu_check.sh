#!/usr/bin/env bash
# The GPU checks, on one GPU machine, in about 6 minutes: NCCL DDP, FSDP, Lightning FSDP and
# DeepSpeed ZeRO-3 (bench/gpu_check.py, each a small training run through TorchTrainer(use_gpu=True))
# and JAX (a small run through JaxTrainer(use_gpu=True)); one PASS/FAIL line each.
# Exit status: 0 all passed, 1 a check failed, 2 no GPU (found before anything is installed).
#
#   bench/gpu_check.sh
#       With a package index: a fresh virtualenv (VENV=/tmp/trainkit-gpu-venv) gets torch's CUDA
#       build (TORCH=torch==2.13.0), Lightning, DeepSpeed and the trainkit packages (editable). The
#       jax check runs only where JAX names what to install (e.g. JAX='jax[cuda13]'), else it says SKIP.
#   GPU_CHECK_PYTHON=python3 bench/gpu_check.sh
#       Without a package index (a machine that reaches none): that interpreter as it is, with its
#       own torch, Lightning and JAX. The wheels in .whl/ (Ray, DeepSpeed and whatever of their needs
#       the interpreter lacks) go into GPU_CHECK_SITE (/tmp/site) with pip --no-index --no-deps;
#       trainkit runs from the source tree: packages/*/src on PYTHONPATH, with a .dist-info per
#       package written into GPU_CHECK_SITE (its entry points, so the plugins load, and its
#       requirements, which the plugin loader checks the framework against). GPU_CHECK_PACKAGES
#       points at another copy of packages/ (e.g. a `git archive` of a commit).
#   GPU_CHECK_TIMEOUT (70) seconds per check; GPU_CHECKS picks checks ("nccl_ddp jax"); GPU_CHECK_LOGS,
#   a folder for each check's whole output (<check>.log).
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null; then
    echo "FAIL gpu: nvidia-smi not found: no NVIDIA driver on this machine; run bench/gpu_check.sh where a GPU is" >&2
    exit 2
fi
if ! gpus=$(timeout 30 nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
    echo "FAIL gpu: nvidia-smi lists no GPU: $gpus" >&2
    exit 2
fi
echo "$gpus"

checks=${GPU_CHECKS:-nccl_ddp fsdp lightning_fsdp deepspeed_zero3 jax}
skip=""
started=$SECONDS
if [[ -n ${GPU_CHECK_PYTHON:-} ]]; then
    PY=$GPU_CHECK_PYTHON
    SITE=${GPU_CHECK_SITE:-/tmp/site}
    PACKAGES=$(cd "${GPU_CHECK_PACKAGES:-packages}" && pwd) || exit 1
    mkdir -p "$SITE"
    wheels=(.whl/*.whl)
    if [[ -e ${wheels[0]} ]] && ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target "$SITE" "${wheels[@]}" >"$SITE.install.log" 2>&1; then
        echo "FAIL install: pip install --no-index .whl/*.whl, see $SITE.install.log"; tail -5 "$SITE.install.log"
        exit 1
    fi
    # What `pip install` of each package would leave in site-packages besides its code.
    if ! "$PY" - "$SITE" "$PACKAGES" core torch lightning hf jax <<'EOF'; then
import pathlib, sys, tomllib

site, packages = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for package in sys.argv[3:]:
    project = tomllib.loads((packages / package / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    for old in site.glob(f"{name.replace('-', '_')}-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    requires = "".join(f"Requires-Dist: {r}\n" for r in project.get("dependencies", []))
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}")
    groups = {**({"console_scripts": project["scripts"]} if "scripts" in project else {}),
              **project.get("entry-points", {})}
    (info / "entry_points.txt").write_text("".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
                                                   + "\n" for group, entries in groups.items()))
    (info / "INSTALLER").write_text("bench/gpu_check.sh\n")
EOF
        echo "FAIL install: could not write the trainkit packages' metadata into $SITE"
        exit 1
    fi
    src=$PACKAGES/core/src:$PACKAGES/torch/src:$PACKAGES/lightning/src:$PACKAGES/hf/src:$PACKAGES/jax/src
    export PYTHONPATH="$SITE:$src${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" -c 'import importlib.metadata as md, sys
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "missing"
print(f"python {sys.version.split()[0]},", ", ".join(f"{n} {v(n)}" for n in
      ("torch", "jax", "jax-cuda13-plugin", "lightning", "ray", "deepspeed", "pydantic", "trainkit-core")))'
else
    VENV=${VENV:-/tmp/trainkit-gpu-venv}
    TORCH=${TORCH:-torch==2.13.0}
    JAX=${JAX:-}
    PY=$VENV/bin/python
    if [[ -z $JAX ]]; then
        skip="jax"
    fi
    if ! { python3 -m venv "$VENV" &&
           timeout 300 "$VENV/bin/pip" install -q "$TORCH" lightning "deepspeed>=0.19" ${JAX:+"$JAX"} \
               -e packages/core -e packages/torch -e packages/lightning ${JAX:+-e packages/jax}; } >"$VENV.install.log" 2>&1; then
        echo "FAIL install: see $VENV.install.log"; tail -5 "$VENV.install.log"
        exit 1
    fi
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA')" 2>/dev/null; then
    echo "FAIL install: $("$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1) is not a CUDA build, or it sees no GPU (torch.cuda.is_available() is False)"
    exit 1
fi
echo "installed in $((SECONDS - started)) s"

export RAY_USAGE_STATS_ENABLED=0 OMP_NUM_THREADS=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX takes what it needs, not 75% of the GPU
failed=0
for check in $checks; do
    if [[ " $skip " == *" $check "* ]]; then
        echo "SKIP $check: JAX is not set (venv mode installs no JAX unless JAX='jax[cuda13]' or the like)"
        continue
    fi
    started=$SECONDS
    out=$(timeout -k 10 "${GPU_CHECK_TIMEOUT:-70}" "$PY" bench/gpu_check.py "$check" 2>&1)
    status=$?
    if [[ -n ${GPU_CHECK_LOGS:-} ]]; then
        mkdir -p "$GPU_CHECK_LOGS" && printf '%s\n' "$out" >"$GPU_CHECK_LOGS/$check.log"
    fi
    if [[ $status == 0 ]]; then
        echo "PASS $check ($((SECONDS - started)) s): $(tail -1 <<<"$out")"
    else
        failed=1
        echo "FAIL $check ($((SECONDS - started)) s, exit $status$([[ $status == 124 ]] && echo ": timed out")):"; tail -15 <<<"$out" | sed 's/^/    /'
    fi
done
exit $failed
