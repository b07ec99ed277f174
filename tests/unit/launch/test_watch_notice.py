"""launch/watch_notice.py: one line when no rank left a watchdog mark, during the job or at its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.contract import mark_watchdog_started, watchdog_started
from distrain.launch.watch_notice import MIN_DELAY_S, WatchNotice

HEAD = "distrain run: warning: --watchdog watches scripts that call distrain.init(); "


def test_marks_are_seen(tmp_path: Path) -> None:
    assert not watchdog_started(str(tmp_path))
    mark_watchdog_started(str(tmp_path), 3)
    assert watchdog_started(str(tmp_path))
    mark_watchdog_started(None, 0)  # outside distrain run: nothing to do
    mark_watchdog_started(str(tmp_path / "gone"), 0)  # the launcher's folder removed: no error
    assert not watchdog_started(str(tmp_path / "gone"))


def test_unwatched_job_gets_one_line_at_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notice = WatchNotice(str(tmp_path), 5, "train.py")
    assert notice.delay == MIN_DELAY_S  # a short --watchdog does not name a script still importing
    notice.finish()
    notice.finish()
    assert capsys.readouterr().err == HEAD + "train.py did not, so nothing was watched\n"


def test_line_during_the_job_then_nothing_at_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notice = WatchNotice(str(tmp_path), 120, "train.py", delay=0).start()
    notice._timer.join(10)
    notice.finish()
    assert (
        capsys.readouterr().err
        == HEAD
        + "train.py has not in its first 0 s, so only a process stopped (SIGSTOP) for over 120 s is watched\n"
    )
    assert (
        notice.stopped is not None and not notice.stopped._thread.is_alive()
    )  # ended with the job


def test_watched_job_says_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notice = WatchNotice(str(tmp_path), 120, "train.py", delay=0)
    mark_watchdog_started(str(tmp_path), 1)
    notice.start()._timer.join(10)
    notice.finish()
    assert capsys.readouterr().err == ""
