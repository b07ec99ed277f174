"""Test-only script: the README's conversion (``loss.backward()``, ``opt.step()``) under --replicas.

No ``ctx.step``, no ``ctx.backward``, no ``ckpt.restore``: only ``distrain.init()``,
``ctx.prepare_model`` and ``ctx.prepare_loader``.  The loop is bounded by ``ctx.steps`` (under
--replicas the job's committed step, healed in a replacement), so every group ends at the same
step.  Each process writes ``final.<group>.<rank>.json`` (pid, ctx.steps, a hash of its
parameters) in --out and appends "pid group rank" to ``starts``.  ``--kill STEP:GROUP:RANK``:
that process SIGKILLs itself once per job right after ctx.steps reaches STEP.  ``--idiom``:
``backward-first`` (opt.zero_grad() after opt.step()), ``zero-first`` (before backward, as the
README), ``scaler`` (the script's own GradScaler: scaled backward, unscale, inf check),
``ctx-step`` (``ctx.step(opt)`` instead of ``opt.step()``: the reference the others must equal) or
``unprepared`` (the optimizer's model was never given to ctx.prepare_model: refused).
"""

import argparse
import hashlib
import json
import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=60)
p.add_argument("--step-sleep", type=float, default=0.0, help="seconds between steps")
p.add_argument("--kill", action="append", default=[], help="STEP:GROUP:RANK")
p.add_argument(
    "--idiom",
    default="zero-first",
    choices=["zero-first", "backward-first", "scaler", "ctx-step", "unprepared"],
)
p.add_argument(
    "--silent-group", type=int, default=-1, help="this group ends outside distrain (os._exit(0))"
)
args = p.parse_args()
kills = {tuple(int(v) for v in spec.split(":")) for spec in args.kill}
group = int(os.environ.get("DISTRAIN_REPLICA_GROUP", "0"))

ctx = distrain.init(verbose=False)
with open(os.path.join(args.out, "starts"), "a") as f:
    f.write(f"{os.getpid()} {group} {ctx.rank}\n")

g = torch.Generator().manual_seed(7)
x = torch.randn(4096, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0).long()
torch.manual_seed(0)
model = ctx.prepare_model(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3)))
loader = ctx.prepare_loader(TensorDataset(x, y), batch_size=8, seed=3)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if args.idiom == "unprepared":  # an optimizer over a model never given to ctx.prepare_model
    opt = torch.optim.SGD(nn.Linear(16, 3).parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu") if args.idiom == "scaler" else None


def kill_now() -> None:
    """SIGKILL this process if a --kill aims at it now (once per job: a marker file)."""
    for at, g_, r_ in sorted(kills):
        if (g_, r_) != (group, ctx.rank) or ctx.steps < at:
            continue
        try:
            marker = os.path.join(args.out, f"killed.{group}.{ctx.rank}.{at}")
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        os.kill(os.getpid(), signal.SIGKILL)


while ctx.steps < args.steps:
    for xb, yb in loader:
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        if args.idiom != "backward-first":
            opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        elif args.idiom == "ctx-step":
            loss.backward()
            ctx.step(opt)
        else:
            loss.backward()
            opt.step()
        if args.idiom == "backward-first":
            opt.zero_grad()
        if ctx.steps == 1 and not os.path.exists(trained := os.path.join(args.out, "trained")):
            open(trained, "w").close()  # for the chaos campaign: faults are aimed from here
        kill_now()
        time.sleep(args.step_sleep)
        if ctx.steps >= args.steps:
            break

if group == args.silent_group:
    os._exit(0)  # no distrain end: no final state reported
digest = hashlib.sha256()
for t in ctx.unwrap(model).state_dict().values():
    digest.update(t.detach().cpu().numpy().tobytes())
for state in opt.state.values():  # Adam's moments: healed too, or the groups drift apart
    for v in state.values():
        digest.update(v.detach().cpu().numpy().tobytes())
with open(os.path.join(args.out, f"final.{group}.{ctx.rank}.json"), "w") as f:
    json.dump({"pid": os.getpid(), "step": ctx.steps, "params": digest.hexdigest()}, f)
