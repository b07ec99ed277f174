"""launch/report/watch_notice.py: one line when no rank reported its watchdog (during or at end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.events import emit, job_events
from distrain.launch.report.watch_notice import MIN_DELAY_S, WatchNotice

HEAD = "distrain run: warning: --watchdog watches scripts that call distrain.init(); "


def test_watchdog_events_are_seen(tmp_path: Path) -> None:
    assert not job_events(str(tmp_path), "watchdog")
    assert emit("watchdog", str(tmp_path), rank=3)
    assert [e["rank"] for e in job_events(str(tmp_path), "watchdog")] == [3]
    assert not emit("watchdog", None)  # outside distrain run: nothing to do
    assert not emit("watchdog", str(tmp_path / "gone"))  # the launcher's folder removed: no error
    assert not job_events(str(tmp_path / "gone"), "watchdog")


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
        + "train.py has not in its first 0 s, so only a process stopped (SIGSTOP) for over "
        "120 s is watched\n"
    )
    assert (
        notice.stopped is not None and not notice.stopped._thread.is_alive()
    )  # ended with the job


def test_watched_job_says_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notice = WatchNotice(str(tmp_path), 120, "train.py", delay=0)
    emit("watchdog", str(tmp_path), rank=1)
    notice.start()._timer.join(10)
    notice.finish()
    assert capsys.readouterr().err == ""
