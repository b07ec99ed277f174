"""The memory tier's choice of K (checkpoint/memory_tier/tier.py): the smallest within 2 %
of a step."""

from __future__ import annotations

import pytest

from distrain.checkpoint.memory_tier.tier import auto_every, choice_line


@pytest.mark.parametrize(
    ("cost", "step", "every"),
    [
        (0.0009, 0.019, 3),  # the example: 0.9 ms snapshots, 19 ms steps
        (0.0001, 0.1, 1),  # cheap snapshots, long steps: every step
        (0.002, 0.1, 1),  # exactly 2 %: still every step
        (0.0021, 0.1, 2),
        (0.05, 0.001, 2500),
        (0.001, 0.0, 50_000_000),  # a zero step time does not divide by zero
    ],
)
def test_auto_every_is_the_smallest_k_within_budget(cost: float, step: float, every: int) -> None:
    k = auto_every(cost, step)
    assert k == every
    if step:
        assert cost / (k * step) <= 0.02 + 1e-12
        assert k == 1 or cost / ((k - 1) * step) > 0.02


def test_choice_line() -> None:
    line = choice_line(3, 0.0009, 0.019)
    assert line == "memory snapshots every 3 steps (0.9 ms each, 1.6 % of a step)"
    assert choice_line(1, 0.0001, 0.1).startswith("memory snapshots every 1 step (")
