"""The marks replica groups leave in the folder they share (DISTRAIN_FT_EVENTS).

One file per group, ``group.G``, of a fixed layout: the group's last committed step (20 bytes
at offset 0, rewritten in place at every committed step), then one byte each for its start,
end and done marks.  Every writer writes its own offsets with one ``os.pwrite`` (never an
append, never a truncation), so writers in different processes never overlap; a reader takes
the whole state with one ``os.pread``.  A mark is set once and never cleared; a byte not yet
written reads as NUL (the file is sparse until then), a step not yet written as "no step".

Read by the other groups (worker/replicas/) and by the groups' launcher (launch/replicas/) to
decide when to train and when to end.  The reports to the launcher are ``replica`` events in
the folder's stream (distrain/events/).
"""

from __future__ import annotations

import os
from typing import NamedTuple

#: bytes of the step field at offset 0: ``f"{step:<20}"``
STEP_BYTES = 20
#: the marks' offsets: one byte each after the step
START, END, DONE = STEP_BYTES, STEP_BYTES + 1, STEP_BYTES + 2
SIZE = DONE + 1
_SET = b"1"


class GroupState(NamedTuple):
    """What one read of a group's file says: its step's text ("" before its first committed
    step) and which marks it left."""

    step: str
    started: bool
    ended: bool
    done: bool


_NONE = GroupState("", False, False, False)


def ft_group_file(folder: str, group: int) -> str:
    """Replica group `group`'s state file: its last committed step and its start, end and done
    marks (the module's layout)."""
    return os.path.join(folder, f"group.{group}")


def open_step(folder: str, group: int) -> int:
    """A descriptor that :func:`write_step` rewrites the group's step through (the group's rank
    0 holds it while it trains; neither truncates nor touches the marks)."""
    return os.open(ft_group_file(folder, group), os.O_WRONLY | os.O_CREAT, 0o644)


def write_step(fd: int, step: int) -> None:
    """Rewrite the committed step in place: one ``pwrite`` of 20 bytes at offset 0."""
    os.pwrite(fd, f"{step:<{STEP_BYTES}}".encode(), 0)


def _mark(folder: str, group: int, offset: int) -> None:
    fd = os.open(ft_group_file(folder, group), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, _SET, offset)
    finally:
        os.close(fd)


def mark_ft_start(folder: str, group: int) -> None:
    """Replica group `group` reached its first quorum or ended (holds no start up)."""
    _mark(folder, group, START)


def mark_ft_end(folder: str, group: int) -> None:
    """Replica group `group`'s launcher ended for good (no replacement will come)."""
    _mark(folder, group, END)


def mark_ft_done(folder: str, group: int) -> None:
    """Every process of replica group `group` reported its final state at distrain's end
    (worker/replicas/rejoin.py): its run is over, whatever happens to its processes next."""
    _mark(folder, group, DONE)


def read_group(folder: str, group: int) -> GroupState:
    """Replica group `group`'s step and marks, in one read (all unset when it has no file)."""
    try:
        fd = os.open(ft_group_file(folder, group), os.O_RDONLY)
    except OSError:
        return _NONE
    try:
        data = os.pread(fd, SIZE, 0)
    except OSError:
        return _NONE
    finally:
        os.close(fd)
    flags = data[STEP_BYTES:].ljust(SIZE - STEP_BYTES, b"\0")
    return GroupState(
        step=data[:STEP_BYTES].strip(b"\0 ").decode(errors="replace"),
        started=flags[0:1] == _SET,
        ended=flags[1:2] == _SET,
        done=flags[2:3] == _SET,
    )


def ft_started(folder: str, group: int) -> bool:
    """Whether replica group `group` left its start mark (:func:`mark_ft_start`)."""
    return read_group(folder, group).started


def ft_ended(folder: str, group: int) -> bool:
    """Whether replica group `group` left its end mark (:func:`mark_ft_end`)."""
    return read_group(folder, group).ended


def ft_done(folder: str, group: int) -> bool:
    """Whether replica group `group` left its done mark (:func:`mark_ft_done`)."""
    return read_group(folder, group).done
