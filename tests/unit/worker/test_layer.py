"""The training layer (worker/layer.py): the one seam through which `--replicas` changes the core.

The core Context and Checkpointer name no replica group; a plain Context's layer changes
nothing; a decorated strategy is prepared by its feature, not by the core.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch import nn

import distrain
from distrain import parallel
from distrain.parallel.options import DDP, Decorated, Strategy
from distrain.worker.layer import PLAIN, Layer

SRC = Path(distrain.__file__).resolve().parent


def test_the_core_context_and_checkpointer_name_no_replica_group() -> None:
    """0 mentions of replicas in the core (24 and 14 before the layer); HSDP's ``replicate=`` and
    DDP's "replicated" model are not the feature."""
    for core in ("worker/context.py", "checkpoint/checkpointer.py"):
        code = (SRC / core).read_text()
        assert not re.findall(r"(?i)\breplicas?\b|replica[ _]group|ft_|torchft", code), core


def test_a_plain_layer_changes_nothing() -> None:
    applied: list[int] = []
    assert PLAIN.step(lambda: applied.append(1)) is True and applied == [1]
    assert PLAIN.committed_step() is None
    assert PLAIN.is_main(0) and not PLAIN.is_main(1)
    assert PLAIN.data_rank(3, 8) == (3, 8)
    spec = DDP()
    assert PLAIN.decorate(spec) is spec


def test_a_withheld_step_is_not_applied_and_the_context_says_so() -> None:
    """ctx.step asks the layer: a step it withholds (a quorum that did not commit) leaves the
    parameters as they were and returns False."""

    class Withholds(Layer):
        def step(self, apply: object) -> bool:
            return False

    environ = dict(os.environ)  # init() sets RANK, WORLD_SIZE, … for one process
    ctx = distrain.init(verbose=False)
    try:
        model = ctx.prepare_model(nn.Linear(2, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        model(torch.ones(1, 2)).sum().backward()
        before = [p.detach().clone() for p in model.parameters()]
        ctx.layer = Withholds()
        assert ctx.step(opt) is False
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
        ctx.layer = PLAIN
        assert ctx.step(opt) is True
        assert not torch.equal(before[0], next(model.parameters()))
    finally:
        ctx.shutdown()
        os.environ.clear()
        os.environ.update(environ)


def test_a_decorated_strategy_is_prepared_by_its_feature() -> None:
    seen: list[tuple[torch.device, Strategy]] = []
    marker = nn.Identity()

    def prepare_with(model: nn.Module, device: torch.device, spec: Strategy) -> nn.Module:
        seen.append((device, spec))
        return marker

    spec = DDP()
    out = parallel.prepare(
        nn.Linear(2, 2),
        Decorated(spec, prepare_with),
        device=torch.device("cpu"),
        precision="fp32",
        distributed=False,
        num_nodes=1,
    )
    assert out is marker and seen == [(torch.device("cpu"), spec)]
