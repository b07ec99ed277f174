"""FSDP vs DDP: model-state memory per rank and step time, for a ≥ 100 M-parameter GPT on CPU.

    # memory, 113.8 M GPT:
    PYTHONPATH=src python3 benchmarks/train/fsdp_memory.py --worlds 1 2 3 --steps 0
    # step time, 10.8 M:
    PYTHONPATH=src python3 benchmarks/train/fsdp_memory.py --worlds 2 --layers 6 --width 384 \
        --heads 6 --steps 5 --timing-rounds 3

Each configuration is one real `distrain run -n N` job, run one at a time (memory is shared).  Every
rank measures its resident memory (RSS) after start-up and warm-up (baseline), after building and
preparing the model (under ``ctx.init_model()``), and after the first optimizer step (parameters,
gradients and AdamW state all exist then); the growth over the baseline is the model state it holds.
"live" readings come after glibc's malloc_trim(0): freed transient buffers (all-gathered weights,
activations) otherwise stay in the process's heap and count as resident ("raw").  It also counts the
tensors' bytes (for a sharded model: the local shards).  Then it times --steps more steps (the
slowest rank's median); the 2-rank jobs are repeated --timing-rounds more times, DDP and FSDP
alternating, for the step-time ratio.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import psutil
import torch
import torch.nn.functional as F
from torch import nn

MiB = 1024 * 1024


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (
            self.qkv(self.ln1(x))
            .view(B, T, 3, self.heads, C // self.heads)
            .transpose(1, 3)
            .unbind(2)
        )
        x = x + self.proj(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        )
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """examples/train_gpt.py's model (--size 100m: 16 layers, width 768, vocabulary 256)."""

    def __init__(self, layers: int, d: int, heads: int, block: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, 256, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


#: FSDP without distrain's heap setting (distrain.parallel.heap): the default; "fsdp"
#: is measured with it (DISTRAIN_MAP_LARGE_BUFFERS=1, opt-in)
GLIBC_DEFAULT = "fsdp-glibc"
#: False in the "as users meet it" jobs: no malloc_trim anywhere, so the peak is what a script sees
TRIM = True


def rss(trim: bool = False) -> int:
    """Resident bytes; with `trim`, after handing glibc's free heap pages back (live memory)."""
    gc.collect()
    if trim and TRIM:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return psutil.Process().memory_info().rss


def local_bytes(t: torch.Tensor) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def worker(args: argparse.Namespace) -> None:
    """One rank: measure memory around model creation and the first step, then time steps."""
    global TRIM
    TRIM = not args.no_trim
    start_abs = rss()  # torch imported (the fork server preloads it), nothing else yet
    import distrain
    from distrain.contract import MAP_LARGE_BUFFERS

    # "fsdp": with the opt-in heap setting; "fsdp-glibc": FSDP with glibc's own heap behaviour
    os.environ[MAP_LARGE_BUFFERS] = "1" if args.strategy == "fsdp" else "0"

    ctx = distrain.init(verbose=False)
    from torch.distributed.fsdp import fully_shard  # noqa: F401  (imported before the baseline)

    warm = nn.Linear(4, 4)  # the first optimizer step imports torch._dynamo: not model state
    torch.optim.AdamW(warm.parameters()).step()
    ctx.barrier()
    base = rss(trim=True)
    torch.manual_seed(0)
    strategy = "fsdp" if args.strategy == GLIBC_DEFAULT else args.strategy
    with ctx.init_model():
        model = GPT(args.layers, args.width, args.heads, args.block)
    model = ctx.prepare_model(model, strategy=strategy)
    after_model, after_model_live = rss(), rss(trim=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 256, (args.batch_size, args.block))

    def step() -> None:
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        ctx.backward(loss)
        ctx.step(opt)

    step()
    after_step, after_step_live = rss(), rss(trim=True)
    counted = sum(local_bytes(p) for p in model.parameters())
    counted += sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    counted += sum(
        local_bytes(v)
        for s in opt.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim() > 0
    )
    times = []
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=False)
        ctx.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    result = {
        "rank": ctx.rank,
        "params": sum(p.numel() for p in model.parameters()),
        "model_mib": (after_model - base) / MiB,
        "state_mib": (after_step - base) / MiB,
        "model_live_mib": (after_model_live - base) / MiB,
        "state_live_mib": (after_step_live - base) / MiB,
        "peak_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base) / MiB,
        # what users meet: whole-process RSS, not growth over a baseline
        "start_abs_mib": start_abs / MiB,
        "base_abs_mib": base / MiB,
        "step_abs_mib": after_step / MiB,
        "step_live_abs_mib": after_step_live / MiB,
        "peak_abs_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MiB,
        "counted_mib": counted / MiB,
        "step_s": statistics.median(times) if times else None,
    }
    with open(os.path.join(args.out, f"rank{ctx.rank}.json"), "w") as f:
        json.dump(result, f)
    ctx.shutdown()


def job(
    args: argparse.Namespace, world: int, strategy: str, steps: int, trim: bool = True
) -> list[dict]:
    """Run one configuration as a real `distrain run` job; every rank's measurements."""
    out = tempfile.mkdtemp(prefix="fsdp-mem-")
    cmd = [
        sys.executable,
        "-m",
        "distrain.cli",
        "run",
        "-n",
        str(world),
        __file__,
        "--worker",
        "--out",
        out,
        "--strategy",
        strategy,
        "--steps",
        str(steps),
        "--layers",
        str(args.layers),
        "--width",
        str(args.width),
        "--heads",
        str(args.heads),
        "--block",
        str(args.block),
        "--batch-size",
        str(args.batch_size),
    ]
    cmd += [] if trim else ["--no-trim"]
    subprocess.run(cmd, check=True, timeout=3600)
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(world)]
    for r in range(world):
        os.remove(os.path.join(out, f"rank{r}.json"))
    os.rmdir(out)
    return ranks


def main() -> None:
    """Parse flags; run the worker, or drive every configuration and print the table and ratios."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default="")
    p.add_argument("--no-trim", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--user-peak",
        action="store_true",
        help="also run every configuration without any malloc_trim and report whole-process "
        "peak RSS per rank",
    )
    p.add_argument("--strategy", default="ddp", help=argparse.SUPPRESS)
    p.add_argument(
        "--heap-timing",
        type=int,
        default=0,
        help="pairs of 2-rank FSDP jobs with and without distrain's heap setting, alternating, for "
        "its step-time cost",
    )
    p.add_argument(
        "--worlds",
        type=int,
        nargs="*",
        default=[1, 2, 3],
        help="world sizes of the memory table (none: skip it)",
    )
    p.add_argument(
        "--timing-rounds", type=int, default=3, help="extra DDP/FSDP pairs at 2 ranks for step time"
    )
    p.add_argument("--steps", type=int, default=3, help="timed steps per job")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--block", type=int, default=64)
    p.add_argument(
        "--batch-size",
        type=int,
        default=2,
        help="sequences per rank (small: activations are not model state)",
    )
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    print(
        f"# torch {torch.__version__}, {os.cpu_count()} cores, load before "
        f"{open('/proc/loadavg').read().split()[:3]}",
        flush=True,
    )
    mem: dict[tuple[int, str], list[dict]] = {}
    step_times: dict[str, list[float]] = {"ddp": [], "fsdp": []}
    for world in args.worlds:
        for strategy in ("ddp", "fsdp"):
            ranks = job(args, world, strategy, args.steps)
            mem[(world, strategy)] = ranks
            if world == 2 and args.steps:
                step_times[strategy].append(max(r["step_s"] for r in ranks))
            worst = max(ranks, key=lambda r: r["state_live_mib"])
            print(
                f"{strategy:4s} x{world}: {worst['params'] / 1e6:.1f} M params; per rank (max over "
                "ranks), RSS growth "
                f"live/raw: after prepare +{worst['model_live_mib']:.0f}/{worst['model_mib']:.0f} "
                "MiB, after first step "
                f"+{worst['state_live_mib']:.0f}/{worst['state_mib']:.0f} MiB, peak "
                f"+{worst['peak_mib']:.0f} MiB; "
                f"tensors counted {worst['counted_mib']:.0f} MiB"
                + (f"; step {max(r['step_s'] for r in ranks):.2f} s" if args.steps else ""),
                flush=True,
            )
    if args.user_peak:
        print(
            "\nwhole-process RSS per rank (MiB, max over ranks): peak of a job without any "
            "malloc_trim | live after the "
            "first step (trimmed job above)"
        )
        for world in args.worlds:
            peaks = {}
            for strategy in ("ddp", "fsdp", GLIBC_DEFAULT):
                ranks = job(args, world, strategy, args.steps, trim=False)
                peaks[strategy] = max(r["peak_abs_mib"] for r in ranks)
                live = (
                    max(r["step_live_abs_mib"] for r in mem[(world, strategy)])
                    if (world, strategy) in mem
                    else float("nan")
                )
                start = max(r["start_abs_mib"] for r in ranks)
                step = f", step {max(r['step_s'] for r in ranks):.2f} s" if args.steps else ""
                print(
                    f"{strategy:10s} x{world}: peak {peaks[strategy]:.0f} | live {live:.0f} "
                    f"(process at start {start:.0f}{step})",
                    flush=True,
                )
            live_ratio = max(r["step_live_abs_mib"] for r in mem[(world, "fsdp")]) / max(
                r["step_live_abs_mib"] for r in mem[(world, "ddp")]
            )
            print(
                f"FSDP/DDP x{world}: peak {peaks['fsdp'] / peaks['ddp']:.3f} (with glibc's "
                "default heap behaviour "
                f"{peaks[GLIBC_DEFAULT] / peaks['ddp']:.3f}), live {live_ratio:.3f}",
                flush=True,
            )
    if 2 in args.worlds and args.steps:
        for _ in range(args.timing_rounds):
            for strategy in ("ddp", "fsdp"):
                step_times[strategy].append(
                    max(r["step_s"] for r in job(args, 2, strategy, args.steps))
                )
    if args.heap_timing:
        ratios = []
        for _ in range(args.heap_timing):
            t = {
                s: max(r["step_s"] for r in job(args, 2, s, max(args.steps, 3)))
                for s in ("fsdp", GLIBC_DEFAULT)
            }
            ratios.append(t["fsdp"] / t[GLIBC_DEFAULT])
            print(
                f"2-rank FSDP step: {t['fsdp']:.3f} s with the heap setting, "
                f"{t[GLIBC_DEFAULT]:.3f} s without",
                flush=True,
            )
        print(
            f"step time with/without the heap setting: median {statistics.median(ratios):.3f} "
            f"(per pair: {', '.join(f'{r:.3f}' for r in ratios)})",
            flush=True,
        )
    print(
        "\nFSDP/DDP per rank  world  RSS growth live  RSS growth raw  peak RSS "
        "growth  counted tensors"
    )
    for world in args.worlds:
        d, f = mem[(world, "ddp")], mem[(world, "fsdp")]
        ratios = [
            max(r[key] for r in f) / max(r[key] for r in d)
            for key in ("state_live_mib", "state_mib", "peak_mib", "counted_mib")
        ]
        print(f"{'':17s}  {world:5d}  " + "  ".join(f"{v:15.3f}" for v in ratios))
    if step_times["ddp"]:
        ratios = [f / d for d, f in zip(step_times["ddp"], step_times["fsdp"], strict=True)]
        print(
            f"\n2-rank step time: DDP {statistics.median(step_times['ddp']):.2f} s, FSDP "
            f"{statistics.median(step_times['fsdp']):.2f} s, "
            f"FSDP/DDP median {statistics.median(ratios):.3f} (per round: "
            f"{', '.join(f'{r:.3f}' for r in ratios)})"
        )
    print(f"# load after {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
