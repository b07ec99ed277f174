"""worker/self_start/watch.py: when a self-starting script's children stop waiting for each other"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from distrain.events import emit
from distrain.worker.self_start import watch
from distrain.worker.self_start.watch import Watcher


class Child:
    """Stands in for a multiprocessing.Process: a pid and an exit code (None: running)."""

    def __init__(self, pid: int, exitcode: int | None = None, daemon: bool = False) -> None:
        self.pid, self.exitcode, self.daemon = pid, exitcode, daemon


@pytest.fixture
def watcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Watcher:
    monkeypatch.setattr(watch, "exit_status", lambda pid, proc=None: proc.exitcode)
    monkeypatch.setattr("sys.argv", ["train.py"])
    w = Watcher(str(tmp_path), timeout_s=60.0)
    monkeypatch.setattr(w, "add", lambda proc: w.procs.__setitem__(proc.pid, proc))  # no thread
    return w


def _note(w: Watcher, kind: str, pid: int, **fields: object) -> None:
    assert emit("group", w.folder, state=kind, pid=pid, **fields)  # as a child reports it


def test_a_child_dying_before_the_group_forms_ends_it_with_its_error(watcher: Watcher) -> None:
    for pid, code in ((10, None), (11, None), (12, 1)):
        watcher.add(Child(pid, code))
    _note(watcher, "join", 10, rank=0, world_size=3, watched=True)
    _note(watcher, "join", 11, rank=1, world_size=3, watched=True)
    _note(watcher, "error", 12, message="AcceleratorError: CUDA error: invalid device ordinal")
    assert watcher.check(0.0) == (
        "train.py: its child 3 of 3 (pid 12) exited with code 1 before the group formed; rank "
        "0, 1 of 3 waited "
        "for it (rank 2 never joined): AcceleratorError: CUDA error: invalid device ordinal"
    )


def test_a_death_without_a_note_waits_for_the_scripts_own_handling(watcher: Watcher) -> None:
    watcher.add(Child(10, None))
    watcher.add(Child(11, -9))
    assert watcher.check(0.0) is None  # mp.spawn raises with the child's traceback first
    assert (
        watcher.check(watch._NO_NOTE_GRACE_S)
        == "train.py: its child 2 of 2 (pid 11) was killed by SIGKILL "
        "before the group formed; 1 other worker(s) stopped"
    )


def test_all_children_done_is_not_a_failure_of_the_watch(watcher: Watcher) -> None:
    watcher.add(Child(10, 1))
    watcher.add(Child(11, 0))
    assert watcher.check(100.0) is None  # nobody is left waiting: the script itself decides


def test_a_member_that_never_joins_ends_the_job_after_the_timeout(watcher: Watcher) -> None:
    for pid in (10, 11):
        watcher.add(Child(pid, None))
    _note(watcher, "join", 10, rank=0, world_size=2, watched=True)
    assert watcher.check(0.0) is None
    assert watcher.check(59.0) is None
    assert watcher.check(60.5) == (
        "train.py: the group of 2 did not form within 60 s (rank 1 never joined; 1 of 2 "
        "joined) — set DISTRAIN_FORM_TIMEOUT to wait longer"
    )


def test_a_formed_group_or_an_unwatched_member_never_times_out(watcher: Watcher) -> None:
    for pid in (10, 11):
        watcher.add(Child(pid, None))
        _note(watcher, "join", pid, rank=pid - 10, world_size=2, watched=True)
        _note(watcher, "formed", pid)
    watcher.check(0.0)
    assert watcher.check(1000.0) is None


def test_an_unwatched_member_never_times_out(watcher: Watcher) -> None:
    for pid in (10, 11):
        watcher.add(Child(pid, None))
    _note(watcher, "join", 10, rank=0, world_size=2, watched=True)
    _note(watcher, "join", 11, rank=1, world_size=2, watched=False)  # its forming cannot be seen
    _note(watcher, "formed", 10)
    watcher.check(0.0)
    assert watcher.check(1000.0) is None


def test_the_script_ending_first_keeps_its_own_exit_status(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    acts: list[object] = []
    monkeypatch.setattr(watch, "_signal", lambda pid, sig: acts.append((pid, sig)))
    monkeypatch.setattr(watch.os, "_exit", acts.append)
    watcher.add(Child(10, 0))
    watcher.add(Child(11, None, daemon=True))  # multiprocessing terminates daemons at exit
    watcher.script_ended()  # returns: nothing was ending, no child to wait for
    watcher._end("train.py: would have ended the job")  # a no-op now
    assert acts == [] and not watcher._ending


def test_the_script_ending_while_the_watcher_ends_the_job_waits_for_its_exit(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Returning would hand the agent a result from a process about to os._exit (a hung job)."""
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(watch.os, "_exit", fake_exit)
    watcher._ending = True
    start = time.monotonic()
    with pytest.raises(SystemExit):
        watcher.script_ended(wait_s=0.3)
    assert exits == [1] and time.monotonic() - start >= 0.3


def test_the_script_ending_waits_for_its_running_children_with_the_watch_on(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As multiprocessing's exit joins them; standing down first would let a stuck one hang."""
    child = Child(10, None)
    watcher.add(child)
    done = threading.Thread(target=watcher.script_ended)
    done.start()
    done.join(0.3)
    assert done.is_alive() and not watcher._script_done
    child.exitcode = 0
    done.join(5.0)
    assert not done.is_alive() and watcher._script_done


def test_group_events_written_after_a_check_are_read_by_the_next(watcher: Watcher) -> None:
    watcher.add(Child(10, None))
    watcher.add(Child(11, None))
    assert emit("checkpoint", watcher.folder, step=3, path="p")  # the stream is the job's
    _note(watcher, "join", 10, rank=0, world_size=2, watched=True)
    assert watcher.check(0.0) is None
    assert watcher.check(61.0) == (
        "train.py: the group of 2 did not form within 60 s (rank 1 never joined; 1 of 2 "
        "joined) — set DISTRAIN_FORM_TIMEOUT to wait longer"
    )
    _note(watcher, "join", 11, rank=1, world_size=2, watched=True)  # read from where it stopped
    _note(watcher, "formed", 10)
    _note(watcher, "formed", 11)
    assert watcher.check(62.0) is None


def test_the_watch_thread_never_prints_a_traceback(
    watcher: Watcher, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(watch, "_POLL_S", 0.01)

    def broken(now: float) -> None:
        raise ValueError("max() arg is an empty sequence")

    monkeypatch.setattr(watcher, "check", broken)
    uncaught: list[object] = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)  # what would print the traceback
    thread = threading.Thread(target=watcher._loop)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and not uncaught
    err = capfd.readouterr().err
    assert "Traceback" not in err and "stopped watching the script's children (ValueError" in err
