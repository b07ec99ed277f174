"""What every idiom script shares and the compatibility tests read; not part of any idiom.

The scripts take their settings from the environment, so that every launcher passes them the
same way (torchrun, mpirun and `accelerate launch` each parse argv their own way):

- ``IDIOM_OUT`` (required): the folder each process writes ``final.<rank>.json`` to, at its end:
  its world size, optimizer steps, the samples it trained on and a sha256 over its parameters;
  ``samples.<rank>.<pid>`` gets the dataset indices of every batch it trained on, a line a step.
- ``IDIOM_STEPS`` (default 12): optimizer steps to train.
- ``IDIOM_STRATEGY`` (default ddp): what scripts using ``ctx.prepare_model`` pass as strategy.
- ``IDIOM_CKPT``: a checkpoint folder (scripts that use ``ctx.checkpointer``); unset: none.
- ``IDIOM_STEP_SLEEP`` (default 0): seconds each step sleeps (to aim faults at a running job).
- ``IDIOM_KILL_AT`` = ``STEP:RANK``: that rank SIGKILLs itself after STEP, once per job
  (``killed`` in IDIOM_OUT remembers it).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

SAMPLES = 480
STEPS = int(os.environ.get("IDIOM_STEPS", "12"))
CKPT = os.environ.get("IDIOM_CKPT") or None
STRATEGY = os.environ.get("IDIOM_STRATEGY", "ddp")
OUT = Path(os.environ["IDIOM_OUT"])
OUT.mkdir(parents=True, exist_ok=True)


def dataset() -> TensorDataset:
    """480 fixed samples of 16 features, 4 classes, and each sample's index (for counting)."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, 16, generator=g)
    y = (x[:, :4].argmax(1) + (x[:, 4] > 1).long()) % 4
    return TensorDataset(x, y, torch.arange(SAMPLES))


def model() -> nn.Module:
    """The same small MLP on every rank (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def digest(module: nn.Module) -> str:
    """sha256 over every parameter and buffer, in state-dict order."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        full = t.full_tensor() if hasattr(t, "full_tensor") else t
        h.update(name.encode())
        h.update(full.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def after_step(rank: int, step: int, indices: torch.Tensor) -> None:
    """Record the batch's samples; sleep or die where the environment says."""
    with open(OUT / f"samples.{rank}.{os.getpid()}", "a") as f:
        f.write(f"{step} " + " ".join(str(int(i)) for i in indices.tolist()) + "\n")
    if os.environ.get("IDIOM_STEP_SLEEP"):
        time.sleep(float(os.environ["IDIOM_STEP_SLEEP"]))
    kill = os.environ.get("IDIOM_KILL_AT")
    if kill:
        at, who = (int(v) for v in kill.split(":"))
        marker = OUT / "killed"
        if step >= at and rank == who and not marker.exists():
            marker.write_text(f"{os.getpid()} {step}\n")
            os.kill(os.getpid(), signal.SIGKILL)


def finish(module: nn.Module, rank: int, world: int, steps: int, **extra: object) -> None:
    """Write this process's final.<rank>.json."""
    record = {"rank": rank, "world": world, "steps": steps, "digest": digest(module), **extra}
    (OUT / f"final.{rank}.json").write_text(json.dumps(record))
    if rank == 0:
        print(f"IDIOM DONE steps={steps} world={world} digest={record['digest'][:16]}", flush=True)
