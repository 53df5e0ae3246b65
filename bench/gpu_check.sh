#!/usr/bin/env bash
# The GPU checks, on one GPU machine, in at most 8 minutes: installs torch's CUDA build (from the
# machine's package index), Lightning, DeepSpeed and the trainkit packages from this tree into a
# fresh virtualenv, then runs NCCL DDP, FSDP, Lightning FSDP and DeepSpeed ZeRO-3 (bench/gpu_check.py,
# each a small training run through TorchTrainer(use_gpu=True)) and prints one PASS/FAIL line each.
# Exit status: 0 all passed, 1 a check failed, 2 no GPU (found before anything is installed).
#   bench/gpu_check.sh                 TORCH=torch==2.13.0 and VENV=/tmp/trainkit-gpu-venv by default
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

VENV=${VENV:-/tmp/trainkit-gpu-venv}
TORCH=${TORCH:-torch==2.13.0}
started=$SECONDS
if ! { python3 -m venv "$VENV" &&
       timeout 300 "$VENV/bin/pip" install -q "$TORCH" lightning "deepspeed>=0.19" \
           -e packages/core -e packages/torch -e packages/lightning; } >"$VENV.install.log" 2>&1; then
    echo "FAIL install: see $VENV.install.log"; tail -5 "$VENV.install.log"
    exit 1
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA')" 2>/dev/null; then
    echo "FAIL install: $TORCH is not a CUDA build, or it sees no GPU (torch.cuda.is_available() is False)"
    exit 1
fi
echo "installed in $((SECONDS - started)) s"

failed=0
for check in nccl_ddp fsdp lightning_fsdp deepspeed_zero3; do
    started=$SECONDS
    if out=$(OMP_NUM_THREADS=1 timeout 150 "$VENV/bin/python" bench/gpu_check.py "$check" 2>&1); then
        echo "PASS $check ($((SECONDS - started)) s): $(tail -1 <<<"$out")"
    else
        failed=1
        echo "FAIL $check ($((SECONDS - started)) s):"; tail -15 <<<"$out" | sed 's/^/    /'
    fi
done
exit $failed
