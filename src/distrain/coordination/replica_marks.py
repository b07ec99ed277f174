"""The marks replica groups leave in the folder they share (DISTRAIN_FT_EVENTS).

Each group's step, start and end, read by the other groups (worker/replicas/) and by the
groups' launcher (launch/replicas/) to decide when to train and when to end.  The reports to
the launcher are ``replica`` events in the folder's stream (distrain/events/).
"""

from __future__ import annotations

import os


def ft_step_file(folder: str, group: int) -> str:
    """Where replica group `group` keeps its last committed step (rewritten in place)."""
    return os.path.join(folder, f"step.{group}")


def ft_start_file(folder: str, group: int) -> str:
    """Exists once replica group `group` reached its first quorum or ended (holds no start up)."""
    return os.path.join(folder, f"start.{group}")


def mark_ft_start(folder: str, group: int) -> None:
    """Leave replica group `group`'s start mark (:func:`ft_start_file`) in `folder`."""
    with open(ft_start_file(folder, group), "a"):
        pass


def ft_end_file(folder: str, group: int) -> str:
    """Exists once replica group `group`'s launcher ended for good (no replacement will come)."""
    return os.path.join(folder, f"end.{group}")


def ft_done_file(folder: str, group: int) -> str:
    """Exists once every process of replica group `group` reported its final state at distrain's
    end (worker/replicas/rejoin.py): its run is over, whatever happens to its processes next."""
    return os.path.join(folder, f"done.{group}")
