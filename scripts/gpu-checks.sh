#!/usr/bin/env bash
# Run the GPU-only checks on a machine with a CUDA GPU (CI has none), then the CPU suite pinned to
# two cores (as CI runs it) for a timing. Output goes to ${OUT:-/tmp/gpu-checks}.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi -L | tee "$out/nvidia-smi.txt"
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.nccl.version())" | tee -a "$out/nvidia-smi.txt"
gpu_tests=$(ls tests/test_gpu*.py)
python3 -m pytest $gpu_tests -v -p no:cacheprovider -p no:benchmark 2>&1 | tee "$out/gpu-tests.log" | tail -30
python3 -m distrain.cli doctor --json > "$out/doctor.json" 2>&1; echo "doctor exit $?"
if [ "${CPU_SUITE:-1}" = 1 ]; then
  CUDA_VISIBLE_DEVICES= taskset -c 0,1 python3 -m pytest -n 2 tests -q -p no:cacheprovider -p no:benchmark \
    --durations=25 2>&1 | tee "$out/cpu-suite.log" | tail -45
fi
