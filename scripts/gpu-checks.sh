#!/usr/bin/env bash
# GPU acceptance in one command, for a machine with 1-8 CUDA GPUs (CI has none):
#   bash scripts/gpu-checks.sh          # report: ${OUT:-/tmp/gpu-checks}/report.md (the path is printed)
#   BUDGET=420 bash scripts/gpu-checks.sh   # every step ends by 420 s; what no longer fits is skipped
#   STEPS='top_.*|watchdog_.*' bash scripts/gpu-checks.sh   # only the steps whose names match
# Every step is bounded by `timeout`; a step that fails or times out is recorded and the next one
# runs. The steps run most wanted first (the figures, then the tutorials, then the GPU tests), so
# that a short lease still yields the figures. Without a GPU it says so in one line and exits 2,
# having run nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ "${CUDA_VISIBLE_DEVICES-unset}" = "" ] || [ "${CUDA_VISIBLE_DEVICES-}" = "-1" ] \
  || ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu-checks: no CUDA GPU on this machine (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them); nothing was run" >&2
  exit 2
fi
ngpu=$($py -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "gpu-checks: nvidia-smi lists a GPU but torch sees none (a CPU build of torch, or a driver too old for it); nothing was run" >&2
  exit 2
fi
n=$((ngpu < 8 ? ngpu : 8))        # processes of the multi-GPU steps: one per GPU, at most 8
n2=$((n < 2 ? n : 2))             # the tutorial scripts and the hang: 2 ranks where there are 2 GPUs
out=${OUT:-/tmp/gpu-checks}
if [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -f "$out/steps.tsv" ]; then
  echo "gpu-checks: $out holds files of something else; set OUT to an empty or new folder" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out"   # a previous report of this script is replaced
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
d=("$py" -m distrain.cli)   # an array, so that `timeout` can run it
steps="$out/steps.tsv"
: > "$steps"

source scripts/gpu_checks_steps.sh

step machine 60 bash -c "nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $py -c \"import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
  'nccl', '.'.join(map(str, torch.cuda.nccl.version())), 'device', torch.cuda.get_device_name(0))\""
device=$($py -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)

step doctor 180 "${d[@]}" doctor --expect-gpu
step doctor_json 180 bash -c "$py -m distrain.cli doctor --expect-gpu --json > '$out/doctor.json'"

# the 100 M GPT: FSDP + bf16 with and without activation checkpointing (peak memory), then DDP
# throughput under distrain run and under plain torchrun, interleaved (the same script and loop)
gpt=(examples/train_gpt.py --size 100m --bf16 --batch-size 16 --block-size 1024)
step fsdp_bf16 300 "${d[@]}" run -n "$n" "${gpt[@]}" --strategy fsdp --steps 20 --log-every 10 --out "$out/gpt-fsdp"
step fsdp_bf16_ac 300 "${d[@]}" run -n "$n" "${gpt[@]}" --strategy fsdp --activation-checkpointing --steps 20 --log-every 10 --out "$out/gpt-fsdp-ac"
for round in 1 2; do
  step "gpt_distrain_$round" 300 "${d[@]}" run -n "$n" "${gpt[@]}" --steps 100 --log-every 25 --out "$out/gpt-ddp"
  step "gpt_torchrun_$round" 300 "$py" -m torch.distributed.run --nproc-per-node "$n" "${gpt[@]}" --steps 100 --log-every 25 --out "$out/gpt-torchrun"
done
for s in fsdp_bf16 fsdp_bf16_ac gpt_distrain_1; do grep -o 'peak memory .*' "$out/$s.log" | tail -n 1 >"$out/$s.result"; done
check gpt_mfu $py scripts/gpu_checks.py gpt "$out/gpt_distrain_2.log" --device "$device" --gpus "$n" --batch 16 --block 1024
check gpt_vs_torchrun $py scripts/gpu_checks.py ratio "$out"/gpt_distrain_{1,2}.log -- "$out"/gpt_torchrun_{1,2}.log \
  --gpus "$n" --batch 16 --block 1024

# SIGKILL of the last rank -> first step after the restart: distrain run vs torchrun, same script.
# Six jobs (two rounds of three); each took 35-50 s on an H100 (CUDA and NCCL start every job)
step kill_resume 480 $py benchmarks/recovery/recovery.py --rounds 2 --nproc "$n" --timeout 120

if [ "$n" -ge 2 ]; then
  step bench_comm_nccl 240 "${d[@]}" bench comm -n "$n" --backend nccl -e 256M
  step raw_all_reduce 240 $py -m torch.distributed.run --nproc-per-node "$n" benchmarks/gpu/raw_all_reduce.py --bytes 256M
else
  skip bench_comm_nccl "NCCL collectives need 2 GPUs (this machine has 1: NCCL refuses two ranks on one GPU)"
fi

# tutorial-style GPU-only scripts: native on GPUs, then the same script under --cpu; parameters compared
tut() {  # tut NAME FLAGS... -- SCRIPT ARGS...: runs into $out/tut-NAME/{gpu,cpu}
  local name=$1 flags=()
  shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  mkdir -p "$out/tut-$name/gpu" "$out/tut-$name/cpu"
  step "tut_${name}_gpu" 300 "${d[@]}" run -n "$n2" "${flags[@]}" "$@" --out "$out/tut-$name/gpu"
  step "tut_${name}_cpu" 300 "${d[@]}" run --cpu -n "$n2" "${flags[@]}" "$@" --out "$out/tut-$name/cpu"
  check "tut_${name}_same" $py scripts/gpu_checks.py compare "$out/tut-$name/gpu/final.pt" "$out/tut-$name/cpu/final.pt"
}
tut ddp_torchrun -- tests/gpu_scripts/ddp_torchrun.py
tut legacy_launch --legacy-local-rank -- tests/gpu_scripts/legacy_launch.py
tut image_classifier -- tests/gpu_scripts/image_classifier.py
tut snapshot_trainer -- tests/gpu_scripts/snapshot_trainer.py
# the mp.spawn tutorial starts one process per visible GPU itself, natively (it asserts 2 or more);
# --cpu stands in as many
if [ "$ngpu" -ge 2 ]; then
  mkdir -p "$out/tut-spawn/gpu" "$out/tut-spawn/cpu"
  TUTORIAL_PORT=29613 step tut_spawn_gpu 300 $py tests/gpu_scripts/spawn_tutorial.py "$out/tut-spawn/gpu"
  TUTORIAL_PORT=29614 step tut_spawn_cpu 300 "${d[@]}" run --cpu -n "$ngpu" tests/gpu_scripts/spawn_tutorial.py "$out/tut-spawn/cpu"
  check tut_spawn_same $py scripts/gpu_checks.py compare "$out/tut-spawn/gpu/final.pt" "$out/tut-spawn/cpu/final.pt"
else
  skip tut_spawn "the mp.spawn tutorial asserts 2 or more GPUs (this machine has 1)"
fi

# train through failures on NCCL: two replica groups, each on its own GPUs (TorchFT)
if [ "$ngpu" -ge 2 ]; then
  step replicas_nccl 240 "${d[@]}" run --replicas 2 -n $((n / 2)) examples/train_digits.py --epochs 2 --out "$out/replicas"
else
  skip replicas_nccl "two replica groups need a GPU each (distrain refuses two groups on one GPU)"
fi

# distrain top with NVML columns, from a finished job's run directory
step top_job 300 "${d[@]}" run -n "$n" --run-dir "$out/run-top" examples/train_digits.py --epochs 3 --out "$out/run-top/out"
step top_json 60 bash -c "$py -m distrain.cli top '$out/run-top' --json > '$out/top.json'"
check top_nvml $py scripts/gpu_checks.py top "$out/top.json"

# a hang on NCCL: the last rank sleeps at step 3, the watchdog must name it and stop the job
EXPECT=nonzero step watchdog_hang 240 "${d[@]}" run -n "$n2" --watchdog 20 tests/scripts/mn_train.py --steps 100000 \
  --hang-rank $((n2 - 1)) --hang-step 3
check watchdog_named $py scripts/gpu_checks.py watchdog "$out/watchdog_hang.log"

mapfile -t gpu_tests < <($py scripts/gpu_checks.py gpu-tests)
if [ ${#gpu_tests[@]} -gt 0 ]; then
  step gpu_tests 900 $py -m pytest -p no:cacheprovider -q --timeout 300 "${gpu_tests[@]}"
else
  skip gpu_tests "no GPU-only test found under tests/jobs"
fi

report=$($py scripts/gpu_checks.py report "$out")
echo "gpu-checks: report written to $report"
# exit 1 when any step failed or timed out
! awk -F'\t' '$2 == "failed" || $2 == "timeout" {bad = 1} END {exit !bad}' "$steps"
