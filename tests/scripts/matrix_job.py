"""Test-only job for the kill matrix (tests/jobs/test_kill_matrix.py): one model/loader kind a run.

The kinds users train, chosen by flags: a small CNN with plain BatchNorm (or ``--sync-bn``), or an
MLP with dropout; DDP or FSDP (``--strategy``); a dataset whose ``__getitem__`` augments with
torch, ``random`` and numpy draws (``--augment``) read by ``--workers`` DataLoader workers;
``--bf16`` autocast; a OneCycle LR schedule; ``--accum`` micro-batches per step.

Faults fire once, on the first attempt, at optimizer step ``--kill-at``:
  --kill rank     SIGKILL rank ``--fault-rank``
  --kill worker   SIGKILL one DataLoader worker of rank ``--fault-rank`` (what the OOM killer picks)
  --kill save     SIGKILL rank ``--fault-rank`` halfway through writing the checkpoint of that step

``--out`` gets, from rank 0, the full model and optimizer state, the step, and every rank's own
buffers and next random number (gathered), so a resumed run can be compared bit for bit.
"""

import argparse
import os
import random
import signal

import numpy as np
import psutil
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.utils.data import Dataset

import distrain
import distrain.checkpoint.writer as ckpt_writer

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--out", required=True)
p.add_argument("--model", choices=["cnn-bn", "mlp-dropout"], default="cnn-bn")
p.add_argument("--sync-bn", action="store_true")
p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
p.add_argument("--workers", type=int, default=0)
p.add_argument("--persistent", action="store_true")
p.add_argument("--augment", action="store_true")
p.add_argument("--bf16", action="store_true")
p.add_argument("--accum", type=int, default=1)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--every", type=int, default=5)
p.add_argument("--kill", choices=["none", "rank", "worker", "save"], default="none")
p.add_argument("--kill-at", type=int, default=-1)
p.add_argument("--fault-rank", type=int, default=1)
args = p.parse_args()

SAMPLES, BATCH = 160, 8  # per rank, per micro-batch: 2 ranks x 8 x accum samples a step
ctx = distrain.init(verbose=False, precision="bf16" if args.bf16 else "fp32")


class Shapes(Dataset):
    """Synthetic 3x12x12 images; with augmentation, a random crop, flip and noise per read."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(11)
        self.x = torch.randn(SAMPLES, 3, 14, 14, generator=g)
        self.y = (self.x[:, 0].mean((1, 2)) > 0).long() + (self.x[:, 1].mean((1, 2)) > 0).long()

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.x[i]
        if not args.augment:
            return img[:, 1:13, 1:13], self.y[i]
        top, left = (int(v) for v in torch.randint(0, 3, (2,)))  # torch's RNG
        img = img[:, top : top + 12, left : left + 12]
        if random.random() < 0.5:  # Python's RNG
            img = img.flip(2)
        noise = torch.from_numpy(
            np.random.normal(0, 0.1, img.shape).astype("float32")
        )  # numpy's RNG
        return img + noise, self.y[i]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    if args.model == "mlp-dropout":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(432, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 3)
        )
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(32, 3),
    )


if args.strategy == "fsdp":
    model = ctx.prepare_model(
        make_model(), strategy="fsdp", shard=(nn.Conv2d, nn.Linear), sync_bn=args.sync_bn
    )
else:
    model = ctx.prepare_model(make_model(), sync_bn=args.sync_bn)
loader = ctx.prepare_loader(
    Shapes(), batch_size=BATCH, num_workers=args.workers, persistent_workers=args.persistent, seed=5
)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
steps_total = args.epochs * (len(loader) // args.accum)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps_total)

first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
faulty = first_attempt and ctx.rank == args.fault_rank and args.kill != "none"


def die(pid: int) -> None:
    print(f"matrix_job: SIGKILL of pid {pid} ({args.kill}) at step {args.kill_at}", flush=True)
    os.kill(pid, signal.SIGKILL)


if faulty and args.kill == "save":
    real_write = ckpt_writer.atomic_write

    def write_then_die(path, write):  # type: ignore[no-untyped-def]
        out = real_write(path, write)
        if f"step_{args.kill_at:08d}" in path:
            die(os.getpid())
        return out

    ckpt_writer.atomic_write = write_then_die

ckpt = ctx.checkpointer(args.dir, every_steps=args.every)
step = ckpt.restore(model=model, optimizer=opt, scheduler=sched, loader=loader).step
micro = 0
for _epoch in range(loader.epoch, args.epochs):
    for xb, yb in loader:
        with ctx.accumulate(model, micro, args.accum), ctx.autocast():
            loss = F.cross_entropy(model(xb), yb) / args.accum
        ctx.backward(loss)
        micro += 1
        if micro % args.accum:
            continue
        ctx.step(opt)
        opt.zero_grad(set_to_none=True)
        sched.step()
        step += 1
        if faulty and step == args.kill_at and args.kill == "rank":
            die(os.getpid())
        if faulty and step == args.kill_at and args.kill == "worker":
            workers = psutil.Process().children()
            assert workers, "no DataLoader worker to kill"
            die(workers[0].pid)
        ckpt.maybe_save(step)
ckpt.save(step)
ckpt.close()

msd, osd = get_state_dict(
    model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
)
own = {
    "buffers": {k: v.detach().clone() for k, v in ctx.unwrap(model).named_buffers()},
    "rng": torch.rand(4),
}
everyone = ctx.gather_object(own)
if ctx.is_main:
    torch.save(
        {"step": step, "model": msd, "opt": osd, "ranks": everyone, "lr": sched.get_last_lr()},
        args.out,
    )
    print(f"finished at step {step}", flush=True)
ctx.shutdown()
