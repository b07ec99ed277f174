#!/usr/bin/env bash
# The GPU-only checks, for a machine with a CUDA GPU (CI has none). Output: ${OUT:-/tmp/gpu-checks}.
#   bash scripts/gpu-checks.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
d() { python3 -m distrain.cli "$@"; }
{
  nvidia-smi -L
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
} 2>&1 | tee "$out/machine.txt"
# pytest: GPU tests, plus the GPU cases of the checkpoint / monitor / doctor files
python3 -m pytest -p no:cacheprovider -v tests/jobs/test_gpu.py tests/jobs/test_gpu_comm.py \
  "tests/jobs/test_checkpoint.py::test_cuda_rng_and_model_round_trip" \
  "tests/jobs/test_monitor.py::test_gpu_probe_reads_nvml" 2>&1 | tee "$out/gpu-tests.log" | tail -15
# the doctor on a GPU machine
d doctor --expect-gpu 2>&1 | tee "$out/doctor.txt" | tail -40
# fast (forked) start vs fresh interpreters on CUDA: bitwise equal?
d run --gpus 0 examples/train_digits.py --epochs 2 --out /tmp/g-fast 2>&1 | tail -2
d run --gpus 0 --start-method spawn examples/train_digits.py --epochs 2 --out /tmp/g-fresh 2>&1 | tail -2
python3 -c "import torch;a=torch.load('/tmp/g-fast/model.pt',weights_only=True);b=torch.load('/tmp/g-fresh/model.pt',weights_only=True);print('fast == fresh on CUDA:', all(torch.equal(a[k],b[k]) for k in a))"
# metrics with NVML columns
d run -n 1 --run-dir /tmp/g-run examples/train_digits.py --epochs 3 --out /tmp/g-run/out >/dev/null 2>&1
d top /tmp/g-run --once 2>&1 | tee "$out/top.txt"
# checkpoint + resume on GPU (fp16 scaler state included)
d run -n 1 examples/train_digits.py --amp --epochs 2 --checkpoint-dir /tmp/g-ck --checkpoint-every 10 --out /tmp/g-ck/out 2>&1 | tail -2
d run -n 1 examples/train_digits.py --amp --epochs 3 --checkpoint-dir /tmp/g-ck --checkpoint-every 10 --out /tmp/g-ck/out 2>&1 | grep -i "resumed\|done"
# scaling bench on one GPU
d bench scaling --nproc 1 --epochs 2 --out /tmp/g-bench 2>&1 | tail -8
