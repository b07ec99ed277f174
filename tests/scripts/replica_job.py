"""Test-only training script for the --replicas tests: a normal distrain script, no TorchFT code.

It records what the tests check, in --out: ``starts`` gets one line per start of the script
("pid group rank"), ``resumed`` one per return of ``ckpt.restore`` ("pid group rank step"), and
each process writes ``final.<group>.<rank>.json`` (its pid, last step, a hash of its parameters)
when it ends; ``first.<group>.<rank>`` holds "step participants" of the process's first committed
step.  ``--kill STEP:GROUP:RANK`` (repeatable): that process SIGKILLs itself right after
step STEP (the first step at or after it that every group committed), once per job (a marker
file in --out remembers the kill: one kill per process name); ``--kill-at K --kill-group G``
is ``--kill K:G:0``.  The group is read from the environment only to aim the faults and name the
outputs.
"""

import argparse
import atexit
import hashlib
import json
import os
import re
import signal
import time
import urllib.request

import torch
import torch.nn.functional as F
from exit_threads import report_at_exit
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import distrain
from distrain.coordination.replica_marks import ft_done, ft_ended

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--dir", required=True, help="checkpoint directory")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--every", type=int, default=0, help="save a checkpoint every N steps")
p.add_argument(
    "--every-of",
    default="",
    help="GROUP:N: that group saves every N steps instead (the groups' disks hold other steps)",
)
p.add_argument(
    "--ctx-steps",
    action="store_true",
    help="count steps with ctx.steps (the job's step: healed too) instead of one per commit",
)
p.add_argument(
    "--own-loader",
    action="store_true",
    help="a resumable DataLoader of the script's own (it counts its batches), not "
    "ctx.prepare_loader's: distrain cannot move it under a running loop",
)
p.add_argument("--step-sleep", type=float, default=0.05)
p.add_argument("--kill-at", type=int, default=-1)
p.add_argument("--kill-group", type=int, default=1)
p.add_argument("--kill", action="append", default=[], help="STEP:GROUP:RANK, repeatable")
p.add_argument(
    "--kill-in-backward",
    action="store_true",
    help="--kill-at fires inside the backward of the next step, while the other groups wait "
    "in its all-reduce",
)
p.add_argument("--strategy", default="ddp", help="ddp or fsdp inside each group")
p.add_argument(
    "--late-group",
    type=int,
    default=-1,
    help="this group sleeps --late seconds before distrain.init (it loads slowly)",
)
p.add_argument("--late", type=float, default=0.0)
p.add_argument(
    "--late-restart",
    type=float,
    default=0.0,
    help="a replacement sleeps this long before distrain.init (it restarts slowly)",
)
p.add_argument(
    "--perturb-group",
    type=int,
    default=-1,
    help="this group changes a weight after training (the end check must see it)",
)
p.add_argument(
    "--hold-start",
    action="append",
    default=[],
    help="GROUP:ATTEMPT:WHAT (repeatable): that group's start of that attempt waits before "
    "distrain.init, WHAT seconds, or until the file WHAT exists (<= 120 s)",
)
p.add_argument(
    "--hold",
    action="append",
    default=[],
    help="STEP:GROUP:FILE (repeatable): at STEP the processes of GROUP wait (<= 120 s) until FILE "
    "exists (each process leaves restoring.<group>.<rank>.<attempt> in --out just "
    "before its restore)",
)
p.add_argument(
    "--hold-restarted",
    action="append",
    default=[],
    help="STEP:GROUP:WHAT (repeatable): as --hold, in a restarted process only, where WHAT may "
    "also be 'asked': until another group's quorum request waits at the lighthouse; it leaves "
    "held.<group>.<step> in --out when it starts waiting",
)
p.add_argument(
    "--hold-failed",
    action="append",
    default=[],
    help="STEP:GROUP:FILE (repeatable): after a step that did not commit at STEP, the processes "
    "of GROUP wait (<= 120 s) until FILE exists",
)
p.add_argument(
    "--hold-for-restart",
    type=int,
    default=-1,
    help="at this step, a process whose group was not restarted waits (<= 120 s) until some "
    "process started again (the replacement of a fault), so a slow replacement still "
    "finds it training",
)
p.add_argument(
    "--kill-at-exit",
    default="",
    help="GROUP:OTHER: the first process of GROUP (rank 0), at its exit after distrain's end "
    "(its final state reported), waits (<= 120 s) until group OTHER ended, then SIGKILLs itself",
)
p.add_argument(
    "--kill-before-done",
    default="",
    help="GROUP:OTHER: the first process of GROUP (rank 0), at distrain's end once it reported "
    "its final state, waits (<= 120 s) until group OTHER left its done mark, then SIGKILLs "
    "itself (before leaving its own)",
)
p.add_argument(
    "--slow-configure",
    type=float,
    default=0.0,
    help="a replacement's first configure of its cross-group process group (TorchFT's, at its "
    "first quorum) starts this many seconds late: its peers' configure times out",
)
p.add_argument(
    "--trace",
    action="store_true",
    help="trace.<group>.<rank>.<pid>: per step, the counters, a hash of the batch and one of "
    "the local state",
)
args = p.parse_args()
kills = {tuple(int(v) for v in spec.split(":")) for spec in args.kill}
if args.kill_at >= 0:
    kills.add((args.kill_at, args.kill_group, 0))

group = int(os.environ.get("DISTRAIN_REPLICA_GROUP", "0"))
rank = os.environ.get("RANK", "0")
# TorchFT's cross-group gloo group too must be gone when the process ends
report_at_exit(
    lambda line: open(os.path.join(args.out, f"threads.{group}.{rank}"), "w").write(line)
)

if group == args.late_group and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
    time.sleep(args.late)  # the first start only: a replacement comes back as fast as it can
if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
    time.sleep(
        args.late_restart
    )  # a replacement on a loaded machine: the survivors may finish first


def wait_for_file(path: str, ready=os.path.exists) -> None:
    """Wait (<= 120 s) until `path` exists (or `ready(path)`: another group's mark in it)."""
    until = time.monotonic() + 120
    while not ready(path) and time.monotonic() < until:
        time.sleep(0.05)


def wait_for_asking_group() -> None:
    """Wait (<= 120 s) until a quorum request waits at the lighthouse: another group's, as this
    one asks none meanwhile (the lighthouse's /status page counts the requests it holds)."""
    status = os.environ["TORCHFT_LIGHTHOUSE"].rstrip("/") + "/status"
    until = time.monotonic() + 120
    while time.monotonic() < until:
        with urllib.request.urlopen(status, timeout=10) as page:
            held = re.search(r"\[\d+/(\d+) participants healthy\]", page.read().decode())
        if held is None:  # another page: the hold would end at once, the order unforced
            raise SystemExit(f"no 'participants healthy' count on the lighthouse's {status}")
        if int(held[1]) > 0:
            return
        time.sleep(0.05)


attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
for spec in args.hold_start:
    g_, a_, what = spec.split(":", 2)
    if (int(g_), int(a_)) == (group, attempt):
        try:
            time.sleep(float(what))
        except ValueError:  # a file to wait for
            wait_for_file(what)
if args.kill_at_exit and attempt == 0 and os.environ.get("RANK", "0") == "0":
    g_, other = (int(v) for v in args.kill_at_exit.split(":"))
    if g_ == group:

        def kill_at_exit() -> None:  # atexit: registered before init, runs after its end
            wait_for_file(os.environ["DISTRAIN_FT_EVENTS"], lambda f: ft_ended(f, other))
            open(os.path.join(args.out, f"killed_at_exit.{group}"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

        atexit.register(kill_at_exit)
if args.kill_before_done and attempt == 0 and os.environ.get("RANK", "0") == "0":
    g_, other = (int(v) for v in args.kill_before_done.split(":"))
    if g_ == group:
        from distrain.worker.replicas import sync

        write_final = sync.write_final

        def write_final_then_die(replicas) -> None:  # the end reads it from the module at its call
            write_final(replicas)
            wait_for_file(os.environ["DISTRAIN_FT_EVENTS"], lambda f: ft_done(f, other))
            open(os.path.join(args.out, f"killed_before_done.{group}"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

        sync.write_final = write_final_then_die
ctx = distrain.init(verbose=False)
#: this process's replica group (its TorchFT manager), None outside --replicas
replicas = getattr(ctx.layer, "replicas", None)
with open(os.path.join(args.out, "starts"), "a") as f:
    f.write(f"{os.getpid()} {group} {ctx.rank}\n")
if args.slow_configure and attempt > 0 and replicas is not None:
    configure, late = replicas._pg.configure, [args.slow_configure]

    def late_configure(*a, **kw):  # a replacement on a loaded machine, slow to its first one
        time.sleep(late.pop() if late else 0.0)
        return configure(*a, **kw)

    replicas._pg.configure = late_configure

g = torch.Generator().manual_seed(7)
x = torch.randn(4096, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 0).long()
torch.manual_seed(
    group
)  # different initial weights per group: the first quorum must make them equal
model = ctx.prepare_model(
    nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3)), strategy=args.strategy
)


class CountingLoader(DataLoader):
    """The script's own resumable loader: its state is the number of batches it handed out."""

    drawn = 0

    def __iter__(self):
        for batch in super().__iter__():
            self.drawn += 1
            yield batch

    def state_dict(self) -> dict:
        return {"drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.drawn = state["drawn"]


if args.own_loader:
    loader = CountingLoader(TensorDataset(x, y), batch_size=8, shuffle=False)
else:
    loader = ctx.prepare_loader(TensorDataset(x, y), batch_size=8, seed=3)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
every = args.every
if args.every_of and int(args.every_of.split(":")[0]) == group:
    every = int(args.every_of.split(":")[1])
ckpt = ctx.checkpointer(args.dir, every_steps=every)
open(os.path.join(args.out, f"restoring.{group}.{ctx.rank}.{attempt}"), "w").close()
step = ckpt.restore(model=model, optimizer=opt, scheduler=sched, loader=loader).step
with open(os.path.join(args.out, "resumed"), "a") as f:
    f.write(f"{os.getpid()} {group} {ctx.rank} {step}\n")


def kill_now(step: int) -> None:
    """SIGKILL this process if a --kill aims at it after `step` and has not fired yet."""
    # a kill at STEP fires at the first step >= STEP that every group committed together (so
    # "kill both groups" kills them at once, never one while the other is still rejoining)
    everyone = (
        replicas is None or replicas.manager.num_participants() == ctx.settings.replica_groups
    )
    due = sorted(s for s, g, r in kills if s <= step and (g, r) == (group, ctx.rank))
    for at in due if everyone else []:
        try:  # O_EXCL: each kill fires once, also when the replacement passes its step again
            os.close(
                os.open(
                    os.path.join(args.out, f"killed.{group}.{ctx.rank}.{at}"),
                    os.O_CREAT | os.O_EXCL,
                )
            )
        except FileExistsError:
            continue
        os.kill(os.getpid(), signal.SIGKILL)


def hold_for_restart() -> None:
    """Wait until a process started again (more lines in `starts` than the job has processes)."""
    first = ctx.world_size * max(ctx.settings.replica_groups or 1, 1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with open(os.path.join(args.out, "starts")) as f:
            if len(f.readlines()) > first:
                return
        time.sleep(0.05)


def _digest() -> str:
    digest = hashlib.sha256()
    for t in ctx.unwrap(model).state_dict().values():
        t = t.to_local() if hasattr(t, "to_local") else t  # under FSDP: this rank's shard
        digest.update(t.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:12]


def _trace(step: int, committed: bool, xb: torch.Tensor) -> None:
    m = replicas.manager
    batch = hashlib.sha256(xb.detach().cpu().numpy().tobytes()).hexdigest()[:12]
    with open(os.path.join(args.out, f"trace.{group}.{ctx.rank}.{os.getpid()}"), "a") as f:
        f.write(
            f"{step} {m.current_step()} {int(committed)} {m.num_participants()} {batch} "
            f"{loader.state_dict()} {_digest()}\n"
        )


while step < args.steps:
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        if (
            args.kill_in_backward
            and group == args.kill_group
            and ctx.rank == 0
            and 0 <= args.kill_at <= step
            and not os.path.exists(
                os.path.join(args.out, f"killed.{group}.{ctx.rank}.{args.kill_at}")
            )
        ):
            loss.register_hook(
                lambda grad, at=step: (time.sleep(0.3), kill_now(at)) and grad
            )  # peers are in the all-reduce by then
        loss.backward()
        if committed := ctx.step(opt):  # False when the quorum did not commit this step
            if replicas is not None and not os.path.exists(
                first := os.path.join(args.out, f"first.{group}.{ctx.rank}")
            ):
                with open(first, "w") as f:  # how many groups took this process's first step
                    f.write(f"{step} {replicas.manager.num_participants()}\n")
            step = ctx.steps if args.ctx_steps else step + 1
            sched.step()
            ctx.log(loss=loss)  # for distrain top (a no-op without --run-dir)
        ckpt.maybe_save(step)
        if args.trace:
            _trace(step, committed, xb)
        if not args.kill_in_backward:
            kill_now(step)
        if step == args.hold_for_restart:
            hold_for_restart()
        for spec in args.hold:
            at, g_, path = spec.split(":", 2)
            if (int(at), int(g_)) == (step, group):
                wait_for_file(path)
        for spec in args.hold_restarted if attempt > 0 else []:
            at, g_, path = spec.split(":", 2)
            if (int(at), int(g_)) == (step, group):
                open(os.path.join(args.out, f"held.{group}.{step}"), "w").close()
                if path == "asked":
                    wait_for_asking_group()
                else:
                    wait_for_file(path)
        for spec in args.hold_failed if not committed else []:
            at, g_, path = spec.split(":", 2)
            if (int(at), int(g_)) == (step, group):
                wait_for_file(path)
        time.sleep(args.step_sleep)
        if step >= args.steps:
            break

if group == args.perturb_group:
    with torch.no_grad():
        next(ctx.unwrap(model).parameters()).add_(1e-3)
digest = hashlib.sha256()
for t in ctx.unwrap(model).state_dict().values():
    t = t.to_local() if hasattr(t, "to_local") else t  # under FSDP: this rank's shard
    digest.update(t.detach().cpu().numpy().tobytes())
with open(os.path.join(args.out, f"final.{group}.{ctx.rank}.json"), "w") as f:
    json.dump(
        {
            "pid": os.getpid(),
            "step": step,
            "params": digest.hexdigest(),
            "lr": sched.get_last_lr()[0],
        },
        f,
    )
