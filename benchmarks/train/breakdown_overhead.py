"""Step time of the digits CNN with and without the step breakdown, measured side by side.

    PYTHONPATH=src python3 benchmarks/train/breakdown_overhead.py [--rounds 40 --steps 50]

Short blocks of `--steps` training steps alternate between "off" (a plain loop over a prepared
DistributedLoader) and "on" (the same loop with a StepBreakdown attached exactly as ``init()``
attaches it: the loader's data hook, the model's forward pre-hook and gradient hooks, the global
optimizer step hooks, ``backward_done`` as ``ctx.backward`` calls it and ``step_done`` as the step
counter does); the order flips every round so drift in the machine's load hits both alike.  Wall
and process CPU time per step are reported, then the direct cost: the hooks of one step fired in
a tight loop, and the whole cost on a model too small to hide it (12 parameters of one
value: forward, backward and an SGD step of ~0.1 ms, where torch's slower module call path with a
forward hook and the autograd engine's calls into Python for each gradient hook show), both as
a share of the digits step's CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import SRC, loadavg  # noqa: E402

sys.path.insert(0, str(SRC))
from distrain.data.sampler import DistributedLoader, GlobalBatchSampler  # noqa: E402
from distrain.monitor.breakdown import StepBreakdown  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics_overhead import make_model  # noqa: E402  (the digits CNN, as the metrics study uses)


def make_loader() -> DistributedLoader:
    """A prepared-style loader over 8×8 digits-sized samples, batch 32, no workers (as on CPU)."""
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.rand(32 * 400, 1, 8, 8, generator=g), torch.randint(0, 10, (32 * 400,), generator=g)
    )
    return DistributedLoader(
        data, GlobalBatchSampler(len(data), 32, rank=0, world_size=1, seed=0), num_workers=0
    )


class StepHook:
    """The Context's step counter, present with or without the breakdown: a step post-hook that
    calls ``step_done`` when a breakdown is attached."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.bd: StepBreakdown | None = None
        opt.register_step_post_hook(self._hook)

    def _hook(self, *args: object) -> None:
        if self.bd is not None:
            self.bd.step_done()


class Attached:
    """A StepBreakdown wired to the model, loader and optimizer as init() and the Context do it."""

    def __init__(
        self, model: nn.Module, loader: DistributedLoader | None, counter: StepHook
    ) -> None:
        self.bd = StepBreakdown()
        self.bd.watch(model)
        if loader is not None:
            loader.on_data = self.bd.data
        self._loader, self._counter = loader, counter
        counter.bd = self.bd

    def detach(self) -> None:
        self._counter.bd = None
        if self._loader is not None:
            self._loader.on_data = None
        self.bd.close()


def block(
    model: nn.Module, opt: torch.optim.Optimizer, batches, steps: int, bd: StepBreakdown | None
) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per step over `steps` steps."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if bd is not None:
            bd.backward_done()  # what ctx.backward adds
        opt.step()
    return (time.perf_counter() - start) / steps, (time.process_time() - cpu) / steps


def endless(loader: DistributedLoader):
    """Batches forever, epoch after epoch (the loader advances its epoch itself)."""
    while True:
        yield from loader


def hooks_cost(params: int, calls: int = 20_000) -> float:
    """CPU ns of one step's hook calls (data, forward, one per gradient, backward, optimizer, step).

    Thread CPU time, not wall time: on a shared machine a tight loop's wall time counts the
    moments other processes held the core."""
    bd = StepBreakdown()
    p = torch.zeros(1)
    module = nn.Module()
    start = time.thread_time()
    for _ in range(calls):
        bd.data(time.perf_counter())
        bd._on_forward(module, ())
        for _ in range(params):
            bd._on_grad(p)
        bd.backward_done()
        bd._on_optimizer_start(None, (), {})
        bd.step_done()
        bd._on_optimizer_end(None, (), {})
    elapsed = time.thread_time() - start
    bd.close()
    return elapsed / calls * 1e9


def tiny_step_cost(rounds: int = 30, steps: int = 400) -> tuple[float, float]:
    """(off, on) median CPU microseconds per step of a 12-parameter model, blocks interleaved."""
    model = nn.Sequential(*[nn.Linear(1, 1) for _ in range(6)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    counter = StepHook(opt)
    x = torch.ones(1, 1)
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            attached = Attached(model, None, counter) if mode == "on" else None
            bd = attached.bd if attached else None
            start = time.process_time()
            for _ in range(steps):
                if bd is not None:
                    bd.data(time.perf_counter())  # what the prepared loader adds
                loss = model(x).sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if bd is not None:
                    bd.backward_done()
                opt.step()
            cpu[mode].append((time.process_time() - start) / steps * 1e6)
            if attached is not None:
                attached.detach()
    return statistics.median(cpu["off"]), statistics.median(cpu["on"])


def main() -> None:
    """Run the interleaved comparison and print the results."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    print(f"load before: {loadavg()}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, loader = make_model(), make_loader()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = endless(loader)
    counter = StepHook(opt)
    block(model, opt, batches, 50, None)  # warm-up
    wall: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    counted = 0
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            attached = Attached(model, loader, counter) if mode == "on" else None
            w, c = block(model, opt, batches, args.steps, attached.bd if attached else None)
            if attached is not None:
                counted += attached.bd.snapshot()[0]
                attached.detach()
            wall[mode].append(w)
            cpu[mode].append(c)
    assert counted == args.rounds * (args.steps - 1), counted  # the breakdown really ran
    for name, data in (("wall", wall), ("CPU", cpu)):
        off, on = statistics.median(data["off"]), statistics.median(data["on"])
        pairs = [a / b for a, b in zip(data["on"], data["off"], strict=True)]
        print(f"{name:4s} per step: off {off * 1e3:.3f} ms, on {on * 1e3:.3f} ms; ratio of medians "
              f"{on / off:.4f}; "
              f"median of per-round ratios {statistics.median(pairs):.4f}  ({args.rounds} rounds × "
              f"{args.steps} steps)")  # fmt: skip
    ns = hooks_cost(1)  # after the first step one gradient hook is left (StepBreakdown._slim)
    off = statistics.median(cpu["off"])
    print(
        "one step's hook calls (data, one gradient, backward, optimizer, step): "
        f"{ns / 1e3:.1f} us = "
        f"{ns / (off * 1e9) * 100:.3f} % of a step's CPU"
    )
    tiny_off, tiny_on = tiny_step_cost()
    extra = tiny_on - tiny_off
    print(
        f"12-parameter model: {tiny_off:.1f} us CPU per step off, {tiny_on:.1f} us on: "
        f"+{extra:.1f} us = "
        f"{extra / (off * 1e6) * 100:.3f} % of a digits step's CPU"
    )
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
