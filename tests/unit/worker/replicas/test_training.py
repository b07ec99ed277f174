"""worker/replicas/training.py: what prepare_model refuses under `run --replicas` (no TorchFT)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distrain.coordination.replica_marks import ft_started, mark_ft_start
from distrain.errors import DistrainError
from distrain.parallel import DDP, HSDP, resolve
from distrain.worker.replicas import sync as replica_sync
from distrain.worker.replicas.sync import start_together
from distrain.worker.replicas.training import Replicas


def _unstarted() -> Replicas:
    # the refusals come before the Manager is touched: an object without __init__ is enough
    return Replicas.__new__(Replicas)


@pytest.mark.parametrize(
    ("strategy", "options", "said"),
    [
        ("hsdp", {}, "supports strategy='ddp' or 'fsdp'"),
        (HSDP(replicate=2), {}, "supports strategy='ddp' or 'fsdp'"),
        ("ddp", {"sync_bn": True}, "sync_bn=True"),
        (DDP(comm_hook="bf16"), {}, "comm_hook='bf16'"),
        ("ddp", {"bucket_cap_mb": 5}, "bucket_cap_mb=5"),
        ("ddp", {"activation_checkpointing": True}, "activation_checkpointing=True"),
    ],
)
def test_an_option_the_replica_path_would_not_apply_is_refused(
    strategy: object, options: dict, said: str
) -> None:
    spec = resolve(strategy, **options)  # type: ignore[arg-type]
    with pytest.raises(DistrainError, match="--replicas") as err:
        _unstarted().prepare_model(nn.Linear(2, 2), torch.device("cpu"), spec)
    assert said in str(err.value)
    assert "\n" not in str(err.value)


def _group(group: int, groups: int) -> Replicas:
    r = _unstarted()
    r.group, r.groups, r.start_wait_s = group, groups, 120.0
    return r


def test_first_quorum_waits_until_every_group_reached_its_own(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch
) -> None:
    folder = str(tmp_path)
    waited = []

    def sleep(seconds: float) -> None:  # the other group arrives while this one waits
        waited.append(seconds)
        if len(waited) == 3:
            mark_ft_start(folder, 1)

    monkeypatch.setattr(replica_sync.time, "sleep", sleep)
    start_together(_group(0, 2), folder)
    assert len(waited) == 3  # returned at the first look after group 1's mark appeared
    assert ft_started(folder, 0)  # group 0 left its own mark


def test_first_quorum_goes_on_without_a_group_that_never_arrives(
    tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    clock = iter(range(0, 10**6, 30))  # each look at the clock: 30 s later
    monkeypatch.setattr(replica_sync.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(replica_sync.time, "sleep", lambda _s: None)
    start_together(_group(1, 3), str(tmp_path))
    said = capsys.readouterr().err
    assert (
        "distrain: replica group 1 starts without group(s) 0, 2, not at their first step after 120 "
        "s (DISTRAIN_FT_START_WAIT)" in said
    )


def test_a_peer_copies_the_loader_position_of_the_steps_start(  # type: ignore[no-untyped-def]
    monkeypatch,
) -> None:
    """At a step's first forward the loader already counts the batch in flight: a replacement
    copying that position skipped one batch and ended its epochs a step before the others."""
    from torch.utils.data import TensorDataset

    from distrain.data.sampler import DistributedLoader, GlobalBatchSampler

    loader = DistributedLoader(
        TensorDataset(torch.arange(40.0)), GlobalBatchSampler(40, 4, 0, 1, seed=0)
    )
    r = _group(0, 2)
    r.objects, r._positions, r.in_step = {"loader": loader}, {}, False
    r.claimed_step = 1  # the step its state is at (rejoin.py); no Manager asked
    batches = iter(loader)
    next(batches)
    r._mark_positions()  # the end of step 1: one batch consumed
    next(batches)  # step 2's batch is drawn, then its first forward takes the quorum
    r.in_step = True
    assert loader.state_dict()["step_in_epoch"] == 2
    assert r._state()["objects"]["loader"]["step_in_epoch"] == 1  # the peer trains on batch 1 next


def test_a_quorum_torchft_gave_up_on_names_the_lighthouse_the_group_and_the_bound(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from distrain.worker.replicas.sync import quorum_failed

    r = _group(1, 2)
    r.rank, r.quorum_timeout_s = 1, 60.0
    r.lighthouse = "http://127.0.0.1:29510"  # TORCHFT_LIGHTHOUSE, through Settings
    r.manager = SimpleNamespace(current_step=lambda: 32)
    err = quorum_failed(r, RuntimeError("Timeout expired\nmore detail"))
    assert str(err) == (
        "replica group 1 rank 1: no quorum at step 32 (bound 60 s, "
        "DISTRAIN_FT_QUORUM_TIMEOUT): waited for the "
        "TorchFT lighthouse (http://127.0.0.1:29510) and the other ranks of group 1; "
        "RuntimeError: Timeout expired"
    )
