"""A group back from its own checkpoint takes a live group's state at the same step.

TorchFT heals a group only when another is at a further step: two groups at one step are taken
to hold one state.  A group restored from its own checkpoint at step S and a live group at S do
not: every step the live group voted on but did not commit (a peer died in its all-reduce, a
process group failed to configure) consumed a batch of its loaders, and the checkpoint holds the
positions of the last commit.  The two groups then trained on for good, each on other batches,
and only the job's end check saw it (``replica groups ended with different states``; the
launcher-death test under load, where group 0 failed step 2 twice and group 1 came back at 2).

So a group restored from disk at S asks its first quorum as if at S - 1: a live group at S or
further is then ahead, and TorchFT copies its whole state, loader positions included, before
the script's loop starts.  With no group ahead the group takes its step S back.  The state a
group sends carries its own step (:func:`sent_step`): a group that asked as if at S - 1 may be
the furthest one (every group lost, another back from an older checkpoint) and its copier must
end at S, not at the quorum's S - 1.  A first quorum that fails (``got exception in pg
configure``) without a copy is taken again, from disk or not: TorchFT skips the copy then, and
a copy at a later step's quorum comes inside a step of a loop that has begun (midstep.py moves
its loader, but the group's first step trains on the batch it drew before the copy).

A group lost at the end of a run, after the others' scripts ended.  A group whose script ended
serves the groups still to come (sync.serve_stragglers), reports its final state
(sync.write_final), then leaves its done mark (in ``group.G``, coordination/replica_marks)
once every one of its processes reported, and still answers quorums until every other group left
its own mark or ended for good (bounded by ``DISTRAIN_FT_LINGER``).  So no group leaves while
another has not reported its final state: a group lost before its mark (its worker SIGKILLed at
the job's last step, seed 9103 trial 14) finds a live group at the final step and copies its
state there.  Before, the first group to end left as soon as it had met the others twice at the
final step; the other, killed a moment later, had nothing to heal from, retrained every step
alone (a script without a checkpoint) and the job failed at its very end with
``replica groups ended with different states``.

A group lost after its mark had finished its run: every one of its processes had ended the
script and reported its final state, equal to the others'.  Its replacement ends at once
(:func:`end_if_done`): nothing is left to train, and a retraining alone would end with another
state.  The launcher says so in one line and checks the final states reported before the loss.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from distrain.coordination.replica_marks import ft_done, mark_ft_done, read_group
from distrain.errors import DistrainError
from distrain.events import emit
from distrain.log import get_logger
from distrain.worker.replicas.sync import serve_quorums_until, serve_stragglers, write_final

if TYPE_CHECKING:
    from distrain.process.info import ProcessInfo
    from distrain.settings import Settings
    from distrain.worker.replicas.sync import Member

_log = get_logger("train")

#: first quorums taken while each one fails without the copy (then the group restarts)
ATTEMPTS = 4


def _set_step(replicas: Member, step: int) -> None:
    manager = replicas.manager
    manager.load_state_dict({"step": step, "batches_committed": step * replicas.groups})


def first_quorum(replicas: Member, device: torch.device, disk_step: int) -> None:
    """The first quorum of a process (its group restored `disk_step` from its own checkpoint, or
    0): a live group at that step or further is copied; else the group continues from its own."""
    if replicas.groups < 2:
        replicas.quorum()
        return
    behind = disk_step > 0  # from disk: ask as if one step behind
    replicas.claimed_step = disk_step if behind else None  # its state's step, if a peer copies it
    try:
        for _ in range(ATTEMPTS):
            if behind:
                _set_step(replicas, disk_step - 1)
            replicas.quorum()
            manager = replicas.manager
            failed = (
                replicas.source is None
                and manager.errored() is not None
                and manager.num_participants() > 1
            )
            again = torch.tensor([int(failed)], device=device)
            if replicas.size > 1:  # every rank of the group takes the same quorums
                dist.all_reduce(again, op=dist.ReduceOp.MAX)
            if not again.item():
                break
        else:
            err = replicas.manager.errored()
            raise DistrainError(
                f"replica group {replicas.group}: back at step {disk_step}, it could not copy "
                f"the live groups' state in {ATTEMPTS} quorums ("
                f"{str(err.original_exception).splitlines()[0][:200] if err else '?'}); the "
                "group restarts rather than train on from a state of its own"
            )
    finally:
        replicas.claimed_step = None
    if behind and replicas.source is None:  # no group at its step or further: its own leads
        _set_step(replicas, disk_step)


def sent_step(replicas: Member) -> int:
    """The step of the state this process sends a copier (its own, also while it asks as
    if one step behind)."""
    claimed = replicas.claimed_step
    return claimed if claimed is not None else replicas.manager.current_step()


def take_sent_step(replicas: Member, state: dict[str, Any]) -> None:
    """After a copy: take the step of the state copied when TorchFT's quorum step is lower."""
    step = state.get("step")
    if isinstance(step, int) and step > replicas.manager.current_step():
        replicas.manager.load_state_dict(
            {"step": step, "batches_committed": replicas.manager.batches_committed()}
        )


def end_run(replicas: Member, device: torch.device) -> None:
    """At distrain's end: serve the groups still to come, report this process's final state,
    leave the group's done mark, and serve until every other group left its own."""
    deadline = time.monotonic() + replicas.linger_s
    serve_stragglers(replicas, device)
    write_final(replicas)
    mark_done(replicas, device)
    serve_until_others_done(replicas, device, deadline)


def mark_done(replicas: Member, device: torch.device) -> None:
    """Leave this group's done mark once every process of the group reported its final state."""
    if not replicas.events:
        return
    if replicas.size > 1:  # a rank that died before its report fails this all-reduce: no mark
        dist.all_reduce(torch.ones(1, device=device))
    if replicas.rank == 0:
        mark_ft_done(replicas.events, replicas.group)


def _not_done(replicas: Member) -> list[int]:
    folder = replicas.events
    assert folder is not None
    others = ((g, read_group(folder, g)) for g in range(replicas.groups) if g != replicas.group)
    return [g for g, state in others if not state.done and not state.ended]


def serve_until_others_done(replicas: Member, device: torch.device, deadline: float) -> None:
    """Answer quorums until every other group left its done mark or ended for good (or
    `deadline`, monotonic): a group lost meanwhile heals from this one at the final step."""
    if replicas.groups < 2 or not replicas.started or not replicas.events:
        return
    serve_quorums_until(
        replicas,
        device,
        deadline,
        _not_done,
        lambda missing: (
            f"distrain: replica group {replicas.group} ended before group(s) "
            f"{', '.join(map(str, missing))} reported a final state (DISTRAIN_FT_LINGER "
            f"{replicas.linger_s:g} s); a group lost now has no live group to heal from"
        ),
    )


def end_if_done(process: ProcessInfo, settings: Settings) -> None:
    """In a replacement whose group left its done mark (its run was over when it was lost): say
    so and end this process at once with exit code 0."""
    folder, group = settings.ft_events, settings.replica_group
    if not folder or group is None or not ft_done(folder, group):
        return
    if process.rank == 0:
        emit("replica", folder, event="done_before", group=group, rank=process.rank)
    raise SystemExit(0)
