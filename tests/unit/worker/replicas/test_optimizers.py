"""worker/replicas/optimizers.py: an optimizer's own step goes through the replica commit.

The group here is a stand-in holding the commit's answer (no TorchFT, no process group): what is
tested is the gate in front of torch's step, which the job tests (tests/jobs/
test_replicas_optimizer.py) run with real groups.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from distrain.contract import REFUSED_EXIT_CODE, REPLICA_GROUP
from distrain.process import patching
from distrain.worker.replicas import optimizers
from distrain.worker.steps import StepCounter


class Group:
    """A replica group that commits when told to; records the votes."""

    def __init__(self, model: nn.Module, commit: bool = True) -> None:
        self.params = {id(p) for p in model.parameters()}
        self.commit, self.votes, self.applying = commit, 0, False

    def covers(self, optimizer: torch.optim.Optimizer) -> bool:
        return any(id(p) in self.params for g in optimizer.param_groups for p in g["params"])

    def step(self, apply: Callable[[], None]) -> bool:
        self.votes += 1
        if self.commit:
            self.applying = True
            try:
                apply()
            finally:
                self.applying = False
        return self.commit


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(REPLICA_GROUP, "0")
    optimizers.install()
    try:
        yield
    finally:
        optimizers.join(None)
        patching.restore("replicas")


def _stepped(opt: torch.optim.Optimizer, model: nn.Module) -> None:
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()


def test_a_step_the_quorum_does_not_commit_changes_nothing(installed: None) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # it rewraps opt.step: still ours
    group = Group(model, commit=False)
    optimizers.join(group)
    before = [p.detach().clone() for p in model.parameters()]
    _stepped(opt, model)
    assert group.votes == 1 and not opt.state  # no update, no Adam state
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    group.commit = True
    _stepped(opt, model)
    sched.step()
    assert group.votes == 2 and opt.state  # committed: torch's step ran
    assert not torch.equal(before[0], model.weight)


def test_inside_a_commit_the_optimizers_step_is_not_voted_again(installed: None) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    group = Group(model)
    optimizers.join(group)
    model(torch.ones(2, 4)).sum().backward()
    counted: list[int] = []
    counter = StepCounter(counted.append)
    counter.track(model)
    try:
        group.step(opt.step)  # what ctx.step(opt) does: one vote, torch's step once
    finally:
        counter.close()
    assert group.votes == 1 and counted == [1]


def test_a_restore_creating_optimizer_state_is_not_voted(installed: None) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    group = Group(model)
    optimizers.join(group)
    counter = StepCounter(lambda _: None)
    try:
        with counter.paused():  # torch's _init_optim_state steps once with lr 0
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    finally:
        counter.close()
    assert group.votes == 0 and opt.state


@pytest.mark.parametrize("joined", [False, True])
def test_a_process_not_joined_is_refused_at_its_first_step(
    installed: None, capsys: pytest.CaptureFixture[str], joined: bool
) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if joined:  # distrain.init() was called, but this optimizer's model was not prepared
        optimizers.join(Group(nn.Linear(4, 2)))
    with pytest.raises(SystemExit) as exit_:
        _stepped(opt, model)
    assert exit_.value.code == REFUSED_EXIT_CODE
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "cannot run under --replicas: " in lines[0], lines
    why = "over no model given to ctx.prepare_model" if joined else "without calling distrain.init"
    assert why in lines[0] and "distrain.init() and ctx.prepare_model(model)" in lines[0]
    assert lines[0].endswith("for plain data parallel use `distrain run -n N`")


def test_outside_replicas_nothing_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REPLICA_GROUP, raising=False)
    optimizers.install()
    assert patching.applied("replicas") == []
    opt = torch.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1)
    assert "step" not in vars(opt)


def test_a_sampler_over_the_groups_ranks_only_is_refused(
    installed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch.utils.data.distributed import DistributedSampler

    monkeypatch.setenv("DISTRAIN_REPLICA_GROUPS", "2")
    monkeypatch.setenv("WORLD_SIZE", "1")
    DistributedSampler(range(8), num_replicas=2, rank=1)  # over groups × ranks: fine
    with pytest.raises(SystemExit) as exit_:  # over its group's one rank: the same samples
        DistributedSampler(range(8), num_replicas=1, rank=0)
    assert exit_.value.code == REFUSED_EXIT_CODE
    (line,) = capsys.readouterr().err.splitlines()
    assert "a DistributedSampler over 1 process(es), not the 2 of the 2 groups" in line, line
    assert "every group would train on the same samples" in line


def test_the_early_shutdown_is_not_run_by_a_forked_child(tmp_path: Path) -> None:
    """A forked child (a DataLoader worker) ends through threading's exit, whose list it
    inherited: it must not run its parent's shutdown (one whose parent was SIGKILLed hung in it)."""
    import multiprocessing

    from distrain.worker.replicas.sync import before_threads_stop

    ran = tmp_path / "ran"

    def shutdown() -> None:
        with contextlib.suppress(OSError):  # also at this test process's own end: tmp is gone
            ran.write_text(str(os.getpid()))

    before_threads_stop(shutdown)
    child = multiprocessing.get_context("fork").Process(target=int)
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert not ran.exists(), f"the child (pid {ran.read_text()}) ran its parent's shutdown"
