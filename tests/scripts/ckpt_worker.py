"""Test-only training script for the checkpoint tests: tiny MLP with dropout, synthetic data.

Faults are injected deterministically, never by racing a timer:
  --kill-at K          SIGKILL this process right after optimizer step K (before the save check)
  --kill-again K       and in the next restarted attempt at step K (repeatable: one per attempt)
  --kill-after-save K  SIGKILL right after the checkpoint of step K was written
  --kill-in-save K     SIGKILL in the middle of writing the checkpoint of step K
  --raise-at K         raise ValueError at step K
  --freeze-after-loop  SIGSTOP this process after the training loop (and the final state's gather)
  --fault-rank R       the rank that does it (default 1)
  --save-at-start      save step 0 before training, with gradients present and no optimizer
                       step taken (a first step that did not commit), on the first attempt
  --hang-at K          sleep for good right after optimizer step K, on any attempt (the watchdog)
  --linger S           the other ranks sleep S seconds at that step (they outlive the fault, so
                       their node's agent sees a membership change, not a failure of its own)
--strategy fsdp shards the model with FSDP2 (``ctx.prepare_model(strategy="fsdp",
shard=nn.Linear)``: each Linear, then the root) instead of DDP.  --out (and --dump-restored) hold
the full, unsharded model and optimizer state in DCP's naming (parameter names as keys), the same
for every strategy.  Faults fire on the first attempt only (TORCHELASTIC_RESTART_COUNT == 0) and
only when the checkpoint directory has no FAULT_DONE marker, so a fresh start after a fault trains
normally.
"""

import argparse
import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.utils.data import TensorDataset

import distrain
import distrain.checkpoint.writer as ckpt_writer

p = argparse.ArgumentParser()
p.add_argument("--dir", default=None)
p.add_argument("--every", type=int, default=4)
p.add_argument("--every-epochs", type=int, default=0)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--global-batch", type=int, default=12)
p.add_argument("--samples", type=int, default=96)
p.add_argument("--float64", action="store_true")
p.add_argument("--dropout", type=float, default=0.2)
p.add_argument("--async-save", action="store_true")
p.add_argument("--memory-every", default="0", help="memory snapshots every K steps, or auto")
p.add_argument("--out", required=True)
p.add_argument("--kill-at", type=int, default=-1)
p.add_argument("--kill-again", type=int, action="append", default=[])
p.add_argument("--kill-after-save", type=int, default=-1)
p.add_argument("--kill-in-save", type=int, default=-1)
p.add_argument("--raise-at", type=int, default=-1)
p.add_argument("--fault-rank", type=int, default=1)
p.add_argument("--freeze-after-loop", action="store_true")
p.add_argument("--linger", type=float, default=0.0)
p.add_argument("--save-at-start", action="store_true")
p.add_argument("--hang-at", type=int, default=-1)
p.add_argument("--stop-at", type=int, default=-1, help="save and stop cleanly after this step")
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument(
    "--timeline", default=None, help="append kill / first-step-after-restart times (bench)"
)
p.add_argument(
    "--ready-at", type=int, default=-1, help="touch OUT.ready after this step (signal tests)"
)
p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
p.add_argument(
    "--log-steps", action="store_true", help="ctx.log(step=...) every step (chaos: lost steps)"
)
p.add_argument(
    "--dump-restored", default=None, help="write the full state right after restore() here"
)
args = p.parse_args()

dtype = torch.float64 if args.float64 else torch.float32
ctx = distrain.init(verbose=False)
if args.global_batch % ctx.world_size:
    raise SystemExit(
        f"global batch {args.global_batch} is not divisible by {ctx.world_size} processes"
    )
g = torch.Generator().manual_seed(7)
x = torch.randn(args.samples, 16, generator=g, dtype=dtype)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0).long()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(args.dropout), nn.Linear(32, 3)).to(
    dtype
)
model = (
    ctx.prepare_model(net, strategy="fsdp", shard=nn.Linear)
    if args.strategy == "fsdp" and ctx.distributed
    else ctx.prepare_model(net)
)
loader = ctx.prepare_loader(
    TensorDataset(x, y), batch_size=args.global_batch // ctx.world_size, seed=3
)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
first_attempt = attempt == 0
marker = os.path.join(args.dir, "FAULT_DONE") if args.dir else None
# a node that only saw a membership change restarts with TORCHELASTIC_RESTART_COUNT 0: the
# marker (written at the fault) says this attempt is a restart all the same
restarted = not first_attempt or bool(marker and os.path.exists(marker))
faulty = first_attempt and ctx.rank == args.fault_rank and not (marker and os.path.exists(marker))
lingers = not restarted and ctx.rank != args.fault_rank and args.linger > 0
if restarted and ctx.is_main and args.timeline:
    with open(args.timeline, "a") as f:
        f.write(f"restarted {time.time():.6f}\n")  # the new attempt's process group is up
if (
    0 < attempt <= len(args.kill_again) and ctx.rank == args.fault_rank
):  # a restarted attempt's own kill
    faulty, args.kill_at = True, args.kill_again[attempt - 1]


def timeline(event: str) -> None:
    if args.timeline:
        with open(args.timeline, "a") as f:
            f.write(f"{event} {time.time():.6f}\n")


def fault(kind: str) -> None:
    timeline("fault")
    if marker:
        with open(marker, "w") as f:
            f.write(kind)
    if kind == "raise":
        raise ValueError(f"injected failure on rank {ctx.rank}")
    os.kill(os.getpid(), signal.SIGKILL)


def full_state(step: int) -> dict:
    """Model and optimizer, unsharded, on CPU (a collective under FSDP)."""
    msd, osd = get_state_dict(
        model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return {"step": step, "model": msd, "opt": osd}


if faulty and args.kill_in_save >= 0:
    real_write = ckpt_writer.atomic_write

    def write_then_die(path, write):  # type: ignore[no-untyped-def]
        out = real_write(path, write)
        if f"step_{args.kill_in_save:08d}" in path:
            fault("kill-in-save")
        return out

    ckpt_writer.atomic_write = write_then_die

ckpt = (
    ctx.checkpointer(
        args.dir,
        every_steps=args.every,
        every_epochs=args.every_epochs,
        async_save=args.async_save,
        **(
            {"memory_every_steps": m if m == "auto" else int(m)}
            if (m := args.memory_every) != "0"
            else {}
        ),
    )
    if args.dir
    else None
)
step = ckpt.restore(model=model, optimizer=opt, scheduler=sched, loader=loader).step if ckpt else 0
if ckpt and args.save_at_start and not restarted:
    for param in model.parameters():  # the training loop sets them to None before its first use
        param.grad = torch.zeros_like(param)
    ckpt.save(0)
if args.dump_restored:
    restored = full_state(step)
    if ctx.is_main:
        torch.save(restored, args.dump_restored)
for _epoch in range(loader.epoch, args.epochs):
    for xb, yb in loader:
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)  # one GPU per rank where there are GPUs
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        if args.log_steps:  # a no-op without --run-dir
            ctx.log(step=step)
        if restarted and ctx.is_main and not args.__dict__.setdefault("_timed", False):
            args._timed = True
            timeline("resumed_step")
        if faulty and step == args.kill_at:
            fault("kill")
        if faulty and step == args.raise_at:
            fault("raise")
        if ctx.rank == args.fault_rank and step == args.hang_at:
            while True:
                time.sleep(3600)  # the deliberate hang (the watchdog's to find)
        if lingers and step in (args.kill_at, args.raise_at):
            time.sleep(args.linger)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if ckpt:
            ckpt.maybe_save(step)
        if faulty and step == args.kill_after_save:
            fault("kill-after-save")
        if step == args.ready_at and ctx.is_main:
            open(args.out + ".ready", "w").close()
        if step == args.stop_at:
            break
    if step == args.stop_at:
        break
if ckpt:
    ckpt.save(step)
    ckpt.close()
final = full_state(step)
if ctx.is_main:
    torch.save(final, args.out)
    print(f"finished at step {step}", flush=True)
if faulty and args.freeze_after_loop:
    timeline("fault")
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen for good, before its shutdown
ctx.shutdown()
