"""coordination/replica_marks.py: one state file per replica group, each writer at its offsets."""

from __future__ import annotations

import os
from pathlib import Path

from distrain.coordination.replica_marks import (
    SIZE,
    GroupState,
    ft_done,
    ft_ended,
    ft_group_file,
    ft_started,
    mark_ft_done,
    mark_ft_end,
    mark_ft_start,
    open_step,
    read_group,
    write_step,
)


def test_a_group_without_a_file_has_no_step_and_no_mark(tmp_path: Path) -> None:
    assert read_group(str(tmp_path), 3) == GroupState("", False, False, False)


def test_marks_and_step_share_one_file_and_never_overwrite_each_other(tmp_path: Path) -> None:
    folder = str(tmp_path)
    fd = open_step(folder, 1)  # the group's rank 0 holds it from its start
    mark_ft_done(folder, 1)  # a mark before the first step: the step still reads as none
    assert read_group(folder, 1) == GroupState("", False, False, True)
    write_step(fd, 12345)
    mark_ft_start(folder, 1)
    write_step(fd, 7)  # rewritten in place, shorter: no digit of the longer step is left
    mark_ft_end(folder, 1)
    write_step(fd, 8)
    os.close(fd)
    assert read_group(folder, 1) == GroupState("8", True, True, True)
    assert (ft_started(folder, 1), ft_ended(folder, 1), ft_done(folder, 1)) == (True,) * 3
    assert os.listdir(folder) == ["group.1"]  # one file per group: the only channel it adds
    assert os.path.getsize(ft_group_file(folder, 1)) == SIZE


def test_each_mark_is_its_own(tmp_path: Path) -> None:
    folder = str(tmp_path)
    mark_ft_end(folder, 0)
    mark_ft_start(folder, 2)
    assert read_group(folder, 0) == GroupState("", False, True, False)
    assert read_group(folder, 2) == GroupState("", True, False, False)
    assert not ft_done(folder, 0) and not ft_started(folder, 1)
