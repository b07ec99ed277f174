"""The step counter: what counts as the training's step, and what a restore must not add."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from distrain.worker.steps import StepCounter


def _trained() -> tuple[nn.Module, torch.optim.Optimizer, dict]:
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt, get_optimizer_state_dict(model, opt)


def test_a_restore_of_optimizer_state_is_not_a_step() -> None:
    _, _, saved = _trained()
    seen: list[int] = []
    counter = StepCounter(seen.append)
    try:
        model = nn.Linear(4, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        counter.track(model)
        with counter.paused():
            # torch creates the empty optimizer's state with a zero-lr step before loading
            set_optimizer_state_dict(model, opt, saved)
        assert counter.count == 0 and seen == []
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        assert counter.count == 1 and seen == [1]
    finally:
        counter.close()


def test_the_same_restore_outside_paused_counts_its_hidden_step() -> None:
    """What paused() is for: without it torch's state-creating step is counted as step 1."""
    _, _, saved = _trained()
    counter = StepCounter(lambda _count: None)
    try:
        model = nn.Linear(4, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        counter.track(model)
        set_optimizer_state_dict(model, opt, saved)
        assert counter.count == 1
    finally:
        counter.close()
