"""worker/replicas/rejoin.py: the step a copied state carries (no TorchFT)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from distrain.worker.replicas.rejoin import sent_step, take_sent_step


class _Manager:
    """The part of ``torchft.Manager`` the step hand-over uses."""

    def __init__(self, step: int) -> None:
        self.step, self.batches = step, 2 * step

    def current_step(self) -> int:
        return self.step

    def batches_committed(self) -> int:
        return self.batches

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.batches = state["step"], state["batches_committed"]


def _group(step: int, claimed: int | None = None) -> Any:
    return SimpleNamespace(manager=_Manager(step), claimed_step=claimed, groups=2)


def test_a_group_asking_as_if_behind_sends_its_own_step() -> None:
    assert sent_step(_group(9, claimed=10)) == 10  # its first quorum asked as if at step 9
    assert sent_step(_group(9)) == 9


def test_a_copier_takes_the_step_of_the_state_it_copied_when_further() -> None:
    """TorchFT leaves a copier at the quorum's step: one behind the state of a group that asked
    as if one step behind (the copier would train that step again, one step apart for good)."""
    copier = _group(9)
    take_sent_step(copier, {"step": 10})
    assert copier.manager.current_step() == 10 and copier.manager.batches_committed() == 18
    take_sent_step(copier, {"step": 7})  # never back
    take_sent_step(copier, {})  # a state from before the step was sent
    assert copier.manager.current_step() == 10
