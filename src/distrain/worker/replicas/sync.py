"""Helpers of worker/replicas/training.py: a group's run's end, and what building a Manager needs.

Two things make "every group ends with the same state at the same step" hold:

- :func:`serve_stragglers`: a group whose script ended keeps answering quorums until every other
  group has been in two quorums in a row with it (a group that was lost and is coming back copies
  the final state there), or ended for good, or ``DISTRAIN_FT_LINGER`` seconds passed.  Without it a
  survivor that finished while a replacement was still starting left the replacement without a live
  group: it resumed from its own older checkpoint and trained the last steps alone, ending with
  another model and exit code 0 (tests/jobs/test_replicas.py, the FSDP test under load).  Then
  the group still serves until every other group reported its final state (rejoin.end_run).
- :func:`state_digest`: a hash of this process's part of the state, left for the launcher,
  which compares the groups rank by rank and fails the job when they differ
  (launch/replicas/events.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from distrain.contract import FT_QUORUM_TIMEOUT
from distrain.coordination.replica_marks import ft_ended, ft_started, mark_ft_start, read_group
from distrain.errors import DistrainError
from distrain.events import emit
from distrain.log import get_logger
from distrain.process import patching

if TYPE_CHECKING:
    from torchft import Manager

_log = get_logger("train")


class Member(Protocol):
    """What these helpers use of a replica group's process (replicas/training.py's Replicas)."""

    group: int
    groups: int
    rank: int
    size: int
    events: str | None
    manager: Manager
    objects: dict[str, Any]
    started: bool
    source: int | None  # the group this process healed from
    claimed_step: int | None  # its state's step while its first quorum asks as if behind
    met_all_at: int | None
    met_all_times: int
    linger_s: float
    start_wait_s: float
    quorum_timeout_s: float
    lighthouse: str | None

    def quorum(self) -> None:
        """Take one quorum of the replica groups."""
        ...


#: pause between two quorums while waiting (the lighthouse answers a lone group at once)
_PAUSE_S = 0.1


def state_digest(objects: Mapping[str, Any]) -> str:
    """sha256 of this process's registered state: parameters, optimizer, scheduler, loader, ….

    Module buffers are left out: BatchNorm's running statistics come from each group's own
    batches and are not averaged across groups (like the random state, docs/fault_tolerance.md).
    Under FSDP a tensor is this rank's shard.
    """
    digest = hashlib.sha256()
    for name in sorted(objects):
        obj = objects[name]
        obj = plain(obj)
        digest.update(name.encode())
        if isinstance(obj, nn.Module):
            for key, param in obj.named_parameters():
                digest.update(key.encode())
                _update(digest, param)
        else:
            _update(digest, obj.state_dict())
    return digest.hexdigest()


def _update(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        local = value.to_local() if hasattr(value, "to_local") else value
        local = local.detach().cpu().contiguous()
        digest.update(f"{local.dtype}{tuple(local.shape)}".encode())
        digest.update(local.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            digest.update(repr(key).encode())
            _update(digest, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _update(digest, item)
    else:
        digest.update(repr(value).encode())


def write_final(replicas: Member) -> None:
    """Report this process's final step and state digest for the launcher's end-of-job check
    (a ``replica`` event in the groups' shared folder, distrain/events/)."""
    if not replicas.events:
        return
    step = replicas.manager.current_step()
    digest = state_digest(replicas.objects)
    emit(
        "replica",
        replicas.events,
        event="final",
        group=replicas.group,
        rank=replicas.rank,
        step=step,
        digest=digest,
    )


def serve_quorums_until(
    replicas: Member,
    device: torch.device,
    deadline: float,
    missing_groups: Callable[[Member], list[int]],
    warning: Callable[[list[int]], str],
    enough: Callable[[], bool] = lambda: False,
) -> None:
    """Answer quorums until `missing_groups` is empty, `enough`, or `deadline` (monotonic; then
    rank 0 logs `warning` of the groups still missing).  Every rank of the group leaves
    together: one rank may see a mark a moment before another."""
    while not enough():
        missing = missing_groups(replicas)
        timed_out = time.monotonic() > deadline
        stop = torch.tensor([int(not missing or timed_out)], device=device)
        if replicas.size > 1:
            dist.all_reduce(stop, op=dist.ReduceOp.MIN)
        if stop.item():
            if missing and timed_out and replicas.rank == 0:
                _log.warning(warning(missing))
            return
        replicas.quorum()
        time.sleep(_PAUSE_S)


def serve_stragglers(replicas: Member, device: torch.device) -> None:
    """Answer quorums until every group met this one at its final step (or ended, or linger).

    Every rank of the group takes the same quorums (its ranks' requests form one member of
    the lighthouse's quorum), so the ranks agree on each decision through the group.
    """
    if replicas.groups < 2 or not replicas.started:
        return
    # the last two quorums held every group at this step: nobody needs this state.  One is not
    # enough: a group that healed in it may still find its ranks split and restart
    # (agree_in_group), and would then come back to nobody
    serve_quorums_until(
        replicas,
        device,
        time.monotonic() + replicas.linger_s,
        _not_ended,
        lambda missing: (
            f"distrain: replica group {replicas.group} ended without meeting group(s) "
            f"{', '.join(map(str, missing))} after {replicas.linger_s:g} s (DISTRAIN_FT_LINGER); "
            "they may end with another state"
        ),
        enough=lambda: (
            replicas.met_all_at == replicas.manager.current_step() and replicas.met_all_times >= 2
        ),
    )


def start_together(replicas: Member, folder: str) -> None:
    """Wait (rank 0, a group's first quorum) until every group reached its own first quorum.

    TorchFT's first quorum forms with whichever groups asked for it (min_replicas 1): the group
    ready first would train alone, on its share of each batch only, until the others finished
    loading and healed from it.  Every group's first quorum waits here until every group reached
    its own (the launcher marks a group that ended, and carries the marks between nodes), so a
    job's steps are taken by all its groups from the first one.  A replacement finds every mark
    already there and does not wait.  Bounded by ``DISTRAIN_FT_START_WAIT``; past it the group
    starts without the groups it names.
    """
    mark_ft_start(folder, replicas.group)
    deadline = time.monotonic() + replicas.start_wait_s

    def not_started() -> list[int]:
        return [g for g in range(replicas.groups) if not ft_started(folder, g)]

    missing = not_started()
    while missing and time.monotonic() < deadline:
        time.sleep(0.02)
        missing = not_started()
    if missing:
        _log.warning(
            f"distrain: replica group {replicas.group} starts without group(s) "
            f"{', '.join(map(str, missing))}, "
            f"not at their first step after {replicas.start_wait_s:g} s (DISTRAIN_FT_START_WAIT)"
        )


def wait_for_further_groups(replicas: Member, device: torch.device) -> None:
    """After a group's first quorum: while it is alone and behind a step another group is known
    to have committed, take quorums (no step) until a group joins it, bounded by
    ``DISTRAIN_FT_START_WAIT``.

    TorchFT orders states by their step alone.  When every group was lost at once, each restarts
    from its own newest checkpoint, and those differ (a group that healed after its last save
    has an older one).  The group back first used to train alone from its older step: the other,
    back later with a newer state, then found it at the same step with another history (two
    states, no heal: the divergence seen once under load) or ahead (its newer state thrown away).
    Each group's last committed step is in its state file (``group.G``); a group that ended for
    good is not waited for.  Every rank of the group decides together.
    """
    deadline = time.monotonic() + replicas.start_wait_s
    while True:
        furthest = _furthest_other_step(replicas)
        alone = replicas.manager.num_participants() < 2
        behind = furthest is not None and replicas.manager.current_step() < furthest
        timed_out = time.monotonic() > deadline
        wait = torch.tensor([int(alone and behind and not timed_out)], device=device)
        if replicas.size > 1:  # one rank may read a state file a moment after another
            dist.all_reduce(wait, op=dist.ReduceOp.MAX)
        if not wait.item():
            if alone and behind and timed_out and replicas.rank == 0:
                _log.warning(
                    f"distrain: replica group {replicas.group} trains from step "
                    f"{replicas.manager.current_step()} without the group(s) that reached step "
                    f"{furthest}: none came back within {replicas.start_wait_s:g} s "
                    "(DISTRAIN_FT_START_WAIT)"
                )
            return
        time.sleep(_PAUSE_S)
        replicas.quorum()


def _furthest_other_step(replicas: Member) -> int | None:
    folder, furthest = replicas.events, None
    if not folder:
        return None
    for group in range(replicas.groups):
        if group == replicas.group:
            continue
        state = read_group(folder, group)
        if state.ended:
            continue
        try:
            step = int(state.step or -1)
        except ValueError:
            continue
        furthest = step if furthest is None else max(furthest, step)
    return furthest


def quorum_failed(replicas: Member, err: BaseException) -> DistrainError:
    """The one-line error for a quorum TorchFT gave up on: who was waited for, and the bound."""
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
    return DistrainError(
        f"replica group {replicas.group} rank {replicas.rank}: no quorum at step "
        f"{replicas.manager.current_step()} (bound {replicas.quorum_timeout_s:g} s, "
        f"{FT_QUORUM_TIMEOUT}): "
        f"waited for the TorchFT lighthouse ({replicas.lighthouse or '?'}) and the other ranks "
        f"of group {replicas.group}; {type(err).__name__}: {first}"
    )


class GroupSplit(DistrainError):
    """The ranks of one replica group came out of a quorum at different steps or heals."""


def agree_in_group(replicas: Member, device: torch.device) -> None:
    """Raise GroupSplit unless every rank of this group is at the same step after a quorum.

    TorchFT heals rank r of a group from rank r of a live group, each over its own cross-group
    process group.  When configuring that group fails on one rank (``got exception in pg
    configure: Failed to recv``) TorchFT skips that rank's heal and only marks its step as not
    to commit, while the other ranks of the group did heal: the group's ranks are then at
    different steps for good (TorchFT's commit vote keeps them apart, it never re-aligns them),
    their training loops run different numbers of steps and meet in different collectives
    (chaos campaign, seed 15 trial 3: a DCP save's all_gather against the end's all_reduce, a
    hang).  Checked after every quorum, inside the group, so every rank raises together: the
    group's agent restarts the whole group, which heals from a live one.  (The heals themselves
    may differ by rank: at a job's first quorum TorchFT picks a source per rank.)
    """
    step = replicas.manager.current_step()
    agreed = torch.tensor([step, -step], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    high, low = int(agreed[0]), -int(agreed[1])
    if high == low:
        return
    err = replicas.manager.errored()
    cause = (
        f" (its quorum failed here: {str(err.original_exception).splitlines()[0][:200]})"
        if err
        else ""
    )
    raise GroupSplit(
        f"replica group {replicas.group}: its ranks are at different steps after a "
        f"quorum ({low} to "
        f"{high}; rank {replicas.rank} at {step}{cause}): a heal failed on some of its ranks only; "
        f"the group restarts as a whole and heals from a live group"
    )


def _not_ended(replicas: Member) -> list[int]:
    folder = replicas.events
    others = [g for g in range(replicas.groups) if g != replicas.group]
    if not folder:
        return others
    return [g for g in others if not ft_ended(folder, g)]


@contextlib.contextmanager
def real_accelerator(rehearsing: bool) -> Iterator[None]:
    """Inside: torch.accelerator says none under `run --cpu` (TorchFT's Manager asks it)."""
    # under `run --cpu` torch.accelerator answers for stand-in GPUs (for the user's script);
    # TorchFT's Manager asks it once to make a recovery stream, a real CUDA call on a CPU machine
    if not rehearsing:
        yield
        return
    with patching.temporarily(
        torch.accelerator, "is_available", _no_accelerator, feature="replicas"
    ):
        yield


def _no_accelerator() -> bool:
    """``torch.accelerator.is_available()`` while TorchFT builds its Manager under ``run --cpu``."""
    return False


def before_threads_stop(shutdown: Callable[[], None]) -> None:
    """Run `shutdown` when this process's interpreter stops its threads, before ``atexit``.

    A fresh interpreter (``--start-method spawn``) stops every ThreadPoolExecutor, TorchFT's
    Manager's included, before the ``atexit`` handlers: the end's quorums (serving stragglers,
    the final state the launcher checks) failed there (``cannot schedule new futures after
    shutdown``) and no group ever reported.  The fast start runs ``atexit`` earlier.  This
    process only: a forked child (a DataLoader worker) inherits the list and runs it as it
    ends; one whose parent was SIGKILLed hung in the parent's shutdown (py-spy, ``--cpu``).
    """
    owner = os.getpid()

    def in_owner() -> None:
        if os.getpid() == owner:
            shutdown()

    threading._register_atexit(in_owner)  # type: ignore[attr-defined]


def plain(obj: Any) -> Any:
    """The module inside a DDP wrapper; anything else as it is."""
    return obj.module if isinstance(obj, nn.parallel.DistributedDataParallel) else obj
