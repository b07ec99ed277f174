#!/usr/bin/env bash
# The compatibility corpus (docs/compatibility.md): real outside training scripts, run as their
# authors launch them, under the native launcher and under `distrain run` (or `distrain run --cpu`
# for GPU-only scripts), on CPU; results compared bit for bit wherever the native launcher runs.
#
#   scripts/corpus.sh [NAME...]      NAME: imagenet nanogpt timm wzmm torchtitan torchvision
#
# Needs git access to GitHub (CORPUS_GIT_BASE, default https://github.com) and PyPI (timm and
# tiktoken are installed; torch is never upgraded).  Everything is cloned and run under
# CORPUS_DIR (default /tmp/distrain-corpus), never inside this repository.  Each run's output
# goes to $CORPUS_DIR/out/<run>.log, its wall time to $CORPUS_DIR/out/times.tsv, each
# comparison to $CORPUS_DIR/out/compare.tsv.
set -u
HERE="$(cd "$(dirname "$0")/.." && pwd)"
BASE="${CORPUS_GIT_BASE:-https://github.com}"
ROOT="${CORPUS_DIR:-/tmp/distrain-corpus}"
OUT="$ROOT/out"
PY="${PYTHON:-python3}"
export PYTHONPATH="$HERE/src${PYTHONPATH:+:$PYTHONPATH}"
DISTRAIN=("$PY" -m distrain.cli run)
TORCHRUN=("$PY" -m torch.distributed.run)
mkdir -p "$ROOT" "$OUT"

# the commits this page was measured at
EXAMPLES_SHA=77f55b912142e11fcfdf5b530231fb9c52f181e8
NANOGPT_SHA=3adf61e154c3fe3fca428ad6bc3818b27a3b8291
TIMM_SHA=aa4b5850c1543fa488abf260f18390eda46cf85d
WZMM_SHA=2ecf2eea2b97777bb18fe9ff458292fde5a92b7e
TORCHTITAN_SHA=b5bcd76c66d0acb1a08b176d9639425bc55e0b2a
VISION_SHA=d4a1e3d66ab710981aa33f3e6e6003e4b504b56b  # main, 2025-02-05 (0.22.0a0)

# get OWNER/NAME SHA DIR [sparse pattern...]: a checkout of SHA with only those paths
get() {
    local repo=$1 sha=$2 dir=$ROOT/src/$3
    shift 3
    [ -d "$dir/.git" ] && return 0
    git clone -q --no-checkout --filter=blob:none "$BASE/$repo" "$dir" 2>/dev/null ||
        git clone -q --no-checkout "$BASE/$repo" "$dir" || return 1
    if [ $# -gt 0 ]; then
        git -C "$dir" sparse-checkout set --no-cone "$@"
    fi
    git -C "$dir" -c advice.detachedHead=false checkout -q "$sha"
}

# timed NAME DIR CMD...: run CMD in DIR, output to $OUT/NAME.log, wall time and exit code to times.tsv
timed() {
    local name=$1 dir=$2
    shift 2
    local start end rc
    start=$(date +%s.%N)
    (cd "$dir" && timeout 600 "$@") >"$OUT/$name.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    printf '%s\t%.1f\t%s\t%s\n' "$name" "$(echo "$end - $start" | bc)" "$rc" "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/times.tsv"
    echo "$name: exit $rc, $(echo "$end - $start" | bc | cut -c1-6) s (log $OUT/$name.log)"
}

# state_hash FILE [KEY]: sha256 over the tensors of a saved state dict (names, dtypes, shapes, bytes)
state_hash() {
    "$PY" - "$@" <<'EOF'
import argparse, hashlib, sys
import torch
torch.serialization.add_safe_globals([argparse.Namespace])
obj = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
for key in sys.argv[2:]:
    obj = obj[key]
h = hashlib.sha256()
for name in sorted(obj):
    t = obj[name]
    if isinstance(t, torch.Tensor):
        t = t.detach().contiguous().reshape(-1)
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
print(h.hexdigest())
EOF
}

# same NAME A B: record whether two hashes (or two texts) are equal
same() {
    local verdict=DIFFERENT
    [ -n "$2" ] && [ "$2" = "$3" ] && verdict=EQUAL
    printf '%s\t%s\t%s\t%s\n' "$1" "$verdict" "$2" "$3" >>"$OUT/compare.tsv"
    echo "$1: $verdict"
}

# metrics LOG: a log's Epoch/Test lines without their times, sorted (ranks print in any order)
metrics() {
    grep -E '^(Epoch|Test)' "$1" | sed -E 's/Time +[0-9.]+ \( *[0-9.]+\)//; s/Data +[0-9.]+ \( *[0-9.]+\)//' | sort | sha256sum | cut -c1-16
}

# image_folder DIR CLASSES PER_CLASS [SPLITS...]: a tiny ImageFolder of deterministic PNGs
image_folder() {
    "$PY" - "$@" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
root, classes, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
splits = sys.argv[4:] or [""]
rng = np.random.default_rng(0)
for split in splits:
    for c in range(classes):
        d = os.path.join(root, split, f"class{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per):
            base = np.full((40, 40, 3), 40 * c, dtype=np.uint8)
            noise = rng.integers(0, 60, size=(40, 40, 3), dtype=np.uint8)
            Image.fromarray(base + noise).save(os.path.join(d, f"img{i}.png"))
EOF
}

# ---------------------------------------------------------------------------------------------
imagenet() {  # pytorch/examples imagenet/main.py, --dummy data
    get pytorch/examples "$EXAMPLES_SHA" examples '/imagenet/' || return 1
    local src=$ROOT/src/examples/imagenet run=$ROOT/run/imagenet
    mkdir -p "$run"
    # the script's --dummy data is ImageNet-sized (1.28 M images an epoch): a copy with 32 and
    # 16 images of 64x64 keeps a CPU run under a minute; nothing else is changed
    sed -e 's/FakeData(1281167, (3, 224, 224)/FakeData(32, (3, 64, 64)/' \
        -e 's/FakeData(50000, (3, 224, 224)/FakeData(16, (3, 64, 64)/' "$src/main.py" >"$run/main_small.py"
    local args=(-a resnet18 --dummy --epochs 1 -b 8 -j 0 --seed 0 --print-freq 1)
    local port=$((20000 + RANDOM % 20000))
    for launcher in torchrun distrain; do
        local dir=$run/env-$launcher
        rm -rf "$dir" && mkdir -p "$dir"
        if [ $launcher = torchrun ]; then
            timed imagenet-env-torchrun "$dir" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 "$run/main_small.py" "${args[@]}" --dist-url env:// --dist-backend gloo
        else
            timed imagenet-env-distrain "$dir" "${DISTRAIN[@]}" -n 2 "$run/main_small.py" "${args[@]}" --dist-url env:// --dist-backend gloo
        fi
    done
    # on CPU the script never wraps the model in DDP and every rank writes checkpoint.pth.tar:
    # the ranks' own printouts (losses and accuracies, times left out) are what can be compared
    same imagenet-env-printouts "$(metrics "$OUT/imagenet-env-torchrun.log")" "$(metrics "$OUT/imagenet-env-distrain.log")"
    for launcher in python distrain; do
        local dir=$run/spawn-$launcher
        rm -rf "$dir" && mkdir -p "$dir"
        local spawn=("$run/main_small.py" "${args[@]}" --multiprocessing-distributed --world-size 1 --rank 0 --dist-url "tcp://127.0.0.1:$port" --dist-backend gloo)
        if [ $launcher = python ]; then
            timed imagenet-spawn-python "$dir" "$PY" "${spawn[@]}"
        else
            # mp.spawn only under --multiprocessing-distributed: distrain says to pass --self-starting
            timed imagenet-spawn-distrain "$dir" "${DISTRAIN[@]}" --self-starting "${spawn[@]}"
        fi
    done
    # --seed seeds the parent only; the mp.spawn children start unseeded: no two runs agree
    same imagenet-spawn-printouts "$(metrics "$OUT/imagenet-spawn-python.log")" "$(metrics "$OUT/imagenet-spawn-distrain.log")"
    # as on a GPU machine: nccl and one process per GPU, two stand-in GPUs
    local dir=$run/spawn-cpu
    rm -rf "$dir" && mkdir -p "$dir"
    timed imagenet-spawn-distrain-cpu "$dir" "${DISTRAIN[@]}" --cpu --self-starting -n 2 "$run/main_small.py" "${args[@]}" --multiprocessing-distributed --world-size 1 --rank 0 --dist-url "tcp://127.0.0.1:$port"
}

# ---------------------------------------------------------------------------------------------
nanogpt() {  # karpathy/nanoGPT train.py, shakespeare_char config, tiny
    get karpathy/nanoGPT "$NANOGPT_SHA" nanoGPT || return 1
    local src=$ROOT/src/nanoGPT run=$ROOT/run/nanogpt
    mkdir -p "$run"
    rm -rf "$run/repo" && cp -r "$src" "$run/repo" && rm -rf "$run/repo/.git"
    # prepare.py downloads input.txt unless it is there: ~100 kB of fixed text instead
    "$PY" -c "
import this, codecs, sys
text = codecs.decode(this.s, 'rot13') + '\n'
open(sys.argv[1], 'w').write((text * 120)[:100000])" "$run/repo/data/shakespeare_char/input.txt" >/dev/null
    (cd "$run/repo/data/shakespeare_char" && "$PY" prepare.py >/dev/null)
    # under DDP the script forces device cuda:{LOCAL_RANK} whatever --device says (train.py
    # line 88) and passes device_ids=[LOCAL_RANK] to DDP (line 212), which a CPU module refuses:
    # a copy without those runs the native torchrun on CPU
    sed -e "s/^    device = f'cuda:{ddp_local_rank}'/    pass  # corpus copy: --device is kept/" \
        -e "s/^    torch.cuda.set_device(device)/    pass  # corpus copy/" \
        -e "s/DDP(model, device_ids=\[ddp_local_rank\])/DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None)/" \
        "$run/repo/train.py" >"$run/repo/train_cpu.py"
    local args=(config/train_shakespeare_char.py --compile=False --dtype=float32 --max_iters=20
        --lr_decay_iters=20 --eval_interval=10 --eval_iters=4 --log_interval=1 --block_size=64
        --batch_size=8 --n_layer=2 --n_head=2 --n_embd=64 --dropout=0.0 --gradient_accumulation_steps=2
        --warmup_iters=2 --always_save_checkpoint=True)
    timed nanogpt-torchrun-patched "$run/repo" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 train_cpu.py "${args[@]}" --device=cpu --backend=gloo --out_dir=out-torchrun
    timed nanogpt-distrain-patched "$run/repo" "${DISTRAIN[@]}" -n 2 train_cpu.py "${args[@]}" --device=cpu --backend=gloo --out_dir=out-distrain
    timed nanogpt-torchrun-asis "$run/repo" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 train.py "${args[@]}" --device=cpu --backend=gloo --out_dir=out-asis
    timed nanogpt-distrain-cpu-asis "$run/repo" "${DISTRAIN[@]}" --cpu -n 2 train.py "${args[@]}" --out_dir=out-rehearsal
    local a b c
    a=$(state_hash "$run/repo/out-torchrun/ckpt.pt" model)
    b=$(state_hash "$run/repo/out-distrain/ckpt.pt" model)
    c=$(state_hash "$run/repo/out-rehearsal/ckpt.pt" model)
    same nanogpt-patched-state "$a" "$b"
    same nanogpt-rehearsal-vs-torchrun-state "$a" "$c"
    same nanogpt-patched-losses "$(grep -o 'iter [0-9]*: loss [0-9.]*' "$OUT/nanogpt-torchrun-patched.log")" \
        "$(grep -o 'iter [0-9]*: loss [0-9.]*' "$OUT/nanogpt-distrain-patched.log")"
}

# ---------------------------------------------------------------------------------------------
timm() {  # huggingface/pytorch-image-models train.py, run from the checkout beside its timm/
    get huggingface/pytorch-image-models "$TIMM_SHA" timm || return 1
    "$PY" -m pip install -q timm 2>/dev/null  # its dependencies (and an installed timm: the shadowing case)
    local src=$ROOT/src/timm run=$ROOT/run/timm
    mkdir -p "$run"
    [ -d "$run/data" ] || image_folder "$run/data" 2 8 train validation
    local common=(--data-dir "$run/data" --model resnet18 --num-classes 2 --img-size 32 -b 4
        --epochs 1 --warmup-epochs 0 --sched step --lr 0.01 -j 1 --seed 0 --log-interval 1
        --checkpoint-hist 1)
    local args=("${common[@]}" --device cpu)
    timed timm-torchrun "$src" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 train.py "${args[@]}" --output "$run/out-torchrun" --experiment e
    timed timm-distrain "$src" "${DISTRAIN[@]}" -n 2 train.py "${args[@]}" --output "$run/out-distrain" --experiment e
    timed timm-single-python "$src" "$PY" train.py "${args[@]}" --output "$run/out-python" --experiment e
    timed timm-single-distrain "$src" "${DISTRAIN[@]}" -n 1 train.py "${args[@]}" --output "$run/out-distrain1" --experiment e
    same timm-single-state "$(state_hash "$run/out-python/e/last.pth.tar" state_dict)" "$(state_hash "$run/out-distrain1/e/last.pth.tar" state_dict)"
    # two ranks: the script gives DDP device_ids=[device] (train.py, prepare_distributed), which
    # a CPU module refuses, under either launcher; a copy beside the same timm/ passes None on CPU
    sed -e 's/task.prepare_distributed(device_ids=\[device\],/task.prepare_distributed(device_ids=[device] if device.type == "cuda" else None,/' \
        "$src/train.py" >"$src/train_cpu.py"
    timed timm-torchrun-patched "$src" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 train_cpu.py "${args[@]}" --output "$run/out-torchrun-patched" --experiment e
    timed timm-distrain-patched "$src" "${DISTRAIN[@]}" -n 2 train_cpu.py "${args[@]}" --output "$run/out-distrain-patched" --experiment e
    same timm-2-patched-state "$(state_hash "$run/out-torchrun-patched/e/last.pth.tar" state_dict)" "$(state_hash "$run/out-distrain-patched/e/last.pth.tar" state_dict)"
    # as on a GPU machine (--device cuda, the default): the unmodified script under --cpu
    timed timm-distrain-cpu "$src" "${DISTRAIN[@]}" --cpu -n 2 train.py "${common[@]}" --output "$run/out-distrain-cpu" --experiment e
    same timm-2-rehearsal-vs-patched-state "$(state_hash "$run/out-torchrun-patched/e/last.pth.tar" state_dict)" "$(state_hash "$run/out-distrain-cpu/e/last.pth.tar" state_dict)"
}

# ---------------------------------------------------------------------------------------------
wzmm() {  # WZMIAOMIAO pytorch_classification/train_multi_GPU/train_multi_gpu_using_launch.py
    get WZMIAOMIAO/deep-learning-for-image-processing "$WZMM_SHA" wzmm '/pytorch_classification/train_multi_GPU/' || return 1
    local src=$ROOT/src/wzmm/pytorch_classification/train_multi_GPU run=$ROOT/run/wzmm
    mkdir -p "$run"
    [ -d "$run/flowers" ] || image_folder "$run/flowers" 5 5
    local args=(--data-path "$run/flowers" --epochs 1 --batch-size 2 --weights none)
    rm -rf "$run/native" "$run/distrain" && mkdir -p "$run/native" "$run/distrain"
    # as its README says: python -m torch.distributed.launch --nproc_per_node=N --use_env train_multi_gpu_using_launch.py
    timed wzmm-launch-native "$run/native" "$PY" -m torch.distributed.launch --nproc_per_node=2 --use_env "$src/train_multi_gpu_using_launch.py" "${args[@]}"
    timed wzmm-distrain-cpu "$run/distrain" "${DISTRAIN[@]}" --cpu -n 2 "$src/train_multi_gpu_using_launch.py" "${args[@]}"
}

# ---------------------------------------------------------------------------------------------
torchtitan() {  # pytorch/torchtitan llama3 debug model, as run_train.sh starts it
    get pytorch/torchtitan "$TORCHTITAN_SHA" torchtitan '/*' '!/tests/assets/c4_test/' || return 1
    local src=$ROOT/src/torchtitan
    "$PY" -m pip install -q "grain==0.2.18" "torch_checkpointing>=0.1.0" "datasets>=3.6.0,<4.8.0" \
        "tokenizers>=0.15.0" safetensors tyro einops "spmd_types==0.2.3" 2>/dev/null
    # the debug model's dataset (tests/assets/c4_test/data.json) is cloned with the repository;
    # where the clone lacks it (a snapshot without large files) fixed lines of text stand in
    if [ ! -f "$src/tests/assets/c4_test/data.json" ]; then
        mkdir -p "$src/tests/assets/c4_test"
        "$PY" -c "
import json, this, codecs, sys
zen = codecs.decode(this.s, 'rot13').splitlines()
with open(sys.argv[1], 'w') as f:
    for i in range(2000):
        f.write(json.dumps({'text': ' '.join(zen[(i + j) % len(zen)] for j in range(8))}) + '\n')" "$src/tests/assets/c4_test/data.json" >/dev/null
    fi
    timed torchtitan-import "$src" "$PY" -c "import torchtitan.train"
    timed torchtitan-torchrun "$src" "${TORCHRUN[@]}" --nproc_per_node=2 --rdzv_backend c10d --rdzv_endpoint=localhost:0 \
        --local-ranks-filter 0 --role rank --tee 3 -m torchtitan.train --module llama3 --config llama3_debugmodel --training.steps 4
    # run_train.sh: torchrun --nproc_per_node=$NGPU --rdzv_backend c10d --rdzv_endpoint=localhost:0
    #   --local-ranks-filter 0 --role rank --tee 3 -m torchtitan.train --module llama3 --config llama3_debugmodel
    timed torchtitan-distrain-cpu "$src" "${DISTRAIN[@]}" --cpu -n 2 --rdzv_backend c10d --rdzv_endpoint=localhost:0 \
        --local-ranks-filter 0 --role rank --tee 3 -m torchtitan.train --module llama3 --config llama3_debugmodel --training.steps 4
    # the default wraps steps in CUDA graphs, which the rehearsal refuses (exit 3); without them
    timed torchtitan-distrain-cpu-nographs "$src" "${DISTRAIN[@]}" --cpu -n 2 --rdzv_backend c10d --rdzv_endpoint=localhost:0 \
        --local-ranks-filter 0 --role rank --tee 3 -m torchtitan.train --module llama3 --config llama3_debugmodel --training.steps 4 \
        --training.disable_cuda_graphs
}

# ---------------------------------------------------------------------------------------------
torchvision() {  # pytorch/vision references/classification/train.py
    get pytorch/vision "$VISION_SHA" vision '/references/classification/' || return 1
    local src=$ROOT/src/vision/references/classification run=$ROOT/run/torchvision
    mkdir -p "$run"
    # the script reports top-1 and top-5 accuracy (utils.accuracy, topk=(1, 5)): fewer than five
    # classes stop it with "selected index k out of range"
    [ -d "$run/data" ] || image_folder "$run/data" 5 4 train val
    local args=(--data-path "$run/data" --model resnet18 --epochs 1 -b 4 -j 0
        --print-freq 1 --use-deterministic-algorithms --val-resize-size 40 --val-crop-size 32 --train-crop-size 32)
    # as is: init_distributed_mode calls torch.cuda.set_device and picks nccl whatever --device says
    timed torchvision-torchrun-asis "$src" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 train.py "${args[@]}" --device cpu --output-dir "$run/out-torchrun-asis"
    timed torchvision-distrain-asis "$src" "${DISTRAIN[@]}" -n 2 train.py "${args[@]}" --device cpu --output-dir "$run/out-distrain-asis"
    # seeded: the script never seeds (model init, crops), so no two runs agree; one line more
    rm -rf "$run/seeded" "$run/cpu" && cp -r "$src" "$run/seeded"
    sed -i 's/^    utils.init_distributed_mode(args)$/&\n    torch.manual_seed(0)  # corpus copy: seeded/' "$run/seeded/train.py"
    # cpu: the seeded copy without its three CUDA-only lines (set_device and nccl in
    # init_distributed_mode, device="cuda" in reduce_across_processes) and DDP's device_ids on CPU
    cp -r "$run/seeded" "$run/cpu"
    sed -i -e 's/^    torch.cuda.set_device(args.gpu)$/    if args.device != "cpu": torch.cuda.set_device(args.gpu)  # corpus copy/' \
        -e 's/^    args.dist_backend = "nccl"$/    args.dist_backend = "gloo" if args.device == "cpu" else "nccl"  # corpus copy/' \
        -e 's/t = torch.tensor(val, device="cuda")/t = torch.tensor(val, device="cpu" if dist.get_backend() == "gloo" else "cuda")  # corpus copy/' \
        "$run/cpu/utils.py"
    sed -i 's/DistributedDataParallel(model, device_ids=\[args.gpu\])/DistributedDataParallel(model, device_ids=None if args.device == "cpu" else [args.gpu])/' "$run/cpu/train.py"
    timed torchvision-torchrun-cpu "$run/cpu" "${TORCHRUN[@]}" --standalone --nproc-per-node 2 train.py "${args[@]}" --device cpu --output-dir "$run/out-torchrun-cpu"
    timed torchvision-distrain-cpu "$run/cpu" "${DISTRAIN[@]}" -n 2 train.py "${args[@]}" --device cpu --output-dir "$run/out-distrain-cpu"
    # as is (--device cuda, the default) on two stand-in GPUs, and the seeded copy likewise
    timed torchvision-distrain-rehearsal-asis "$src" "${DISTRAIN[@]}" --cpu -n 2 train.py "${args[@]}" --output-dir "$run/out-rehearsal-asis"
    timed torchvision-distrain-rehearsal-seeded "$run/seeded" "${DISTRAIN[@]}" --cpu -n 2 train.py "${args[@]}" --output-dir "$run/out-rehearsal-seeded"
    local a b c
    a=$(state_hash "$run/out-torchrun-cpu/checkpoint.pth" model)
    b=$(state_hash "$run/out-distrain-cpu/checkpoint.pth" model)
    c=$(state_hash "$run/out-rehearsal-seeded/checkpoint.pth" model)
    same torchvision-cpu-state "$a" "$b"
    same torchvision-rehearsal-vs-torchrun-state "$a" "$c"
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
for name in "${@:-imagenet nanogpt timm wzmm torchtitan torchvision}"; do
    for one in $name; do "$one"; done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
