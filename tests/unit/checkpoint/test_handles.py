"""checkpoint/handles.py: a Checkpointer is built from what it needs, never from a Context.

The abandoned-save tests run a real writer against a real (in-process) store: the leader waits for
rank 1's report, and rank 1's published process is one that has really ended (or a stop signal came
with no report), as when a peer dies during a save.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from distrain.checkpoint import (
    Checkpointer,
    CheckpointError,
    JobHandles,
    NoDisk,
    Resumed,
    SaveAbandoned,
)
from distrain.checkpoint.healed import HealedCheckpointer, HealedNoDisk
from distrain.checkpoint.nodes import Topology
from distrain.events import job_events
from distrain.process.info import ProcessInfo
from distrain.process.peers import process_identity
from distrain.worker.lifecycle.failure import exit_abandoned


def test_process_info_is_frozen_and_plain_by_default() -> None:
    process = ProcessInfo()
    assert (process.rank, process.world_size, process.distributed) == (0, 1, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        process.rank = 1
    # no process group: its collectives are the local value
    assert process.broadcast_object({"a": 1}) == {"a": 1}
    assert process.gather_object(3) == [3]
    assert process.all_reduce(2.0, op="max").item() == 2.0


@pytest.mark.usefixtures("writes_environ")  # DCP's import sets torch's compile-cache variable
def test_a_checkpointer_from_handles_alone_saves_and_resumes_bitwise(tmp_path: Path) -> None:
    stalls: list[float] = []
    closers: list[object] = []
    ckpt_resumed: list[int] = []
    handles = JobHandles(
        process=ProcessInfo(),
        job_dir=str(tmp_path / "job"),
        on_stall=stalls.append,
        on_close=closers.append,
        on_resumed=ckpt_resumed.append,
    )
    (tmp_path / "job").mkdir()
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = Checkpointer(handles, tmp_path / "ckpt", every_steps=2, handle_signals=False)
    assert ckpt.restore(model=model, optimizer=opt).fresh
    assert closers, "the owner's shutdown hook was not registered"
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert ckpt.maybe_save(2) is True
    assert len(stalls) == 1 and stalls[0] >= 0  # the step breakdown's stall, through on_stall
    marked = job_events(str(tmp_path / "job"), "checkpoint")[-1]
    assert marked["step"] == 2  # what `distrain run` resumes from, through job_dir
    ckpt.close()

    assert ckpt_resumed == []  # a fresh start tells on_resumed nothing
    again = nn.Linear(4, 3)
    other = Checkpointer(
        JobHandles(on_resumed=ckpt_resumed.append), tmp_path / "ckpt", handle_signals=False
    )
    resumed = other.restore(model=again, optimizer=torch.optim.SGD(again.parameters(), lr=0.1))
    assert resumed.step == 2 and ckpt_resumed == [2]  # the metrics recorder's resumed_at
    assert torch.equal(again.weight, model.weight) and torch.equal(again.bias, model.bias)
    other.close()


class _Heals:
    """A stand-in replica group (the Healer protocol): its own folder, a heal to step 7."""

    committed_positions: dict[str, object] = {}

    def checkpoint_dir(self, directory: str) -> str:
        return directory + "/group_3"

    def stuck(self) -> bool:
        return False

    def restore(self, objects: dict[str, object], resumed: Resumed) -> Resumed:
        return Resumed(step=7, path="live group", extra={"objects": sorted(objects)})


def test_a_healer_subclass_heals_after_the_disk(tmp_path: Path) -> None:
    healed: list[int] = []
    handles = JobHandles(on_resumed=healed.append)
    ckpt = HealedCheckpointer(_Heals(), handles, tmp_path, handle_signals=False)
    assert ckpt.directory == f"{tmp_path}/group_3"
    assert ckpt.restore(model=nn.Linear(2, 2)).step == 7
    healed_nodisk = HealedNoDisk(_Heals(), handles)
    assert healed_nodisk.restore(model=nn.Linear(2, 2)).extra == {"objects": ["model"]}
    assert NoDisk(handles).restore(model=nn.Linear(2, 2)).step == 0  # the core heals nothing
    assert healed == [7, 7]  # a heal from a live group is a resume too (the metrics recorder)
    ckpt.close()


class _Position:
    """A loader's position as state_dict() gives it."""

    def __init__(self, step: int) -> None:
        self.step = step

    def state_dict(self) -> dict[str, int]:
        return {"step_in_epoch": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step_in_epoch"]


def test_replica_groups_save_the_loader_where_their_last_step_committed(tmp_path: Path) -> None:
    """A stop between a batch one group consumed uncommitted and another never drew: both save
    the committed position, so the groups resumed from disk still agree (chaos seed 58, 20)."""
    groups = _Heals()
    groups.committed_positions = {"loader": {"step_in_epoch": 64}}
    ckpt = HealedCheckpointer(groups, JobHandles(), tmp_path, handle_signals=False)
    ckpt.restore(model=nn.Linear(2, 2), loader=_Position(65))  # drew step 65's batch
    ckpt.save(64, wait=True)
    ckpt.close()
    shared = torch.load(tmp_path / "group_3" / "step_00000064" / "shared.pt", weights_only=True)
    assert shared["objects"]["loader"] == {"step_in_epoch": 64}


def _dead_identity() -> str:
    child = subprocess.Popen(["true"])
    child.wait(timeout=60)
    return process_identity().rsplit(":", 1)[0] + f":{child.pid}"


def _leader_of_two(tmp_path: Path, **options: object) -> tuple[Checkpointer, dist.Store]:
    """Rank 0 of a 2-rank job (no process group needed: no model, the store is real)."""
    server = dist.HashStore()
    store = dist.PrefixStore("distrain/ckpt", server)
    process = ProcessInfo(rank=0, world_size=2, local_world_size=2, backend="gloo")
    handles = JobHandles(process=process, store=lambda: store, **options)
    ckpt = Checkpointer(handles, tmp_path, handle_signals=False)
    ckpt.topology = Topology(shared=True, leader=0, members=[0, 1], leaders=[0, 0])
    return ckpt, server


def _next_key(ckpt: Checkpointer, step: int) -> str:
    return f"{ckpt._id}.1/{step}/1"  # the first save of this checkpointer, rank 1's report


def test_a_dead_writer_is_a_typed_verdict_not_an_exit(tmp_path: Path) -> None:
    ckpt, server = _leader_of_two(tmp_path)
    ckpt.handles.store().set(_next_key(ckpt, 3) + "/process", _dead_identity())
    t0 = time.monotonic()
    with pytest.raises(SaveAbandoned) as err:
        ckpt.save(3)
    assert time.monotonic() - t0 < 60  # seen as dead, not waited for (STORE_WAIT_S is 300)
    assert str(err.value) == "save of step 3 abandoned: rank 1 died while writing it"
    assert err.value.exit_code == 1
    assert not (tmp_path / "step_00000003").exists()  # never sealed
    del server


def test_the_lifecycle_exits_with_the_line_and_code_of_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, server = _leader_of_two(tmp_path, on_abandoned=exit_abandoned)
    ckpt.handles.store().set(_next_key(ckpt, 3) + "/process", _dead_identity())
    with pytest.raises(SystemExit) as exited:
        ckpt.save(3)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "distrain: checkpoint: save of step 3 abandoned: rank 1 died while writing it" in err
    del server


def test_a_stop_signal_with_no_report_exits_with_the_signal_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, server = _leader_of_two(tmp_path, on_abandoned=exit_abandoned)
    request = ckpt.preemption.request
    request.signum, request.received_at = signal.SIGTERM, time.monotonic() - 10
    with pytest.raises(SystemExit) as exited:
        ckpt.save(5)  # rank 1 never reports, and is not known dead: the signal decides
    assert exited.value.code == 128 + signal.SIGTERM
    assert "save of step 5 abandoned: stop signal and no report from the other ranks" in (
        capsys.readouterr().err
    )
    del server


def test_in_the_background_a_dead_writer_is_a_failed_save(tmp_path: Path) -> None:
    ckpt, server = _leader_of_two(tmp_path, on_abandoned=exit_abandoned)
    ckpt.async_save = True
    ckpt.handles.store().set(_next_key(ckpt, 4) + "/process", _dead_identity())
    ckpt.save(4)
    with pytest.raises(CheckpointError) as err:
        ckpt.wait()  # reported by the next wait, as before: no exit from a background thread
    assert str(err.value) == (
        "background checkpoint failed: CheckpointError: save of step 4 abandoned: "
        "rank 1 died while writing it"
    )
    del server
