"""lifecycle/stacks.py: SIGUSR1 dumps the stacks, keeps the process alive, chains a user handler."""

from __future__ import annotations

import faulthandler
import os
import signal
from collections.abc import Iterator

import pytest

from distrain.worker.lifecycle.stacks import dump_stacks_on_signal

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 here")


@pytest.fixture
def usr1() -> Iterator[None]:
    """Leave SIGUSR1 as it was: no faulthandler registration, the previous Python handler."""
    previous = signal.getsignal(signal.SIGUSR1)
    yield
    faulthandler.unregister(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, previous)


def test_default_disposition_becomes_a_dump(usr1: None, capfd: pytest.CaptureFixture[str]) -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # what kills a worker without the dump
    assert dump_stacks_on_signal()
    os.kill(os.getpid(), signal.SIGUSR1)  # still alive after this line
    err = capfd.readouterr().err
    assert "most recent call first" in err and "test_default_disposition_becomes_a_dump" in err


def test_a_handler_set_before_still_runs(usr1: None, capfd: pytest.CaptureFixture[str]) -> None:
    seen: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, _frame: seen.append(signum))
    assert dump_stacks_on_signal()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert seen == [signal.SIGUSR1]
    assert "most recent call first" in capfd.readouterr().err


def test_installs_again_after_the_default_came_back(
    usr1: None, capfd: pytest.CaptureFixture[str]
) -> None:
    """A worker's first registration, then signal.signal(SIGUSR1, SIG_DFL), then init(): a dump."""
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    assert dump_stacks_on_signal()
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # faulthandler still counts itself registered
    assert dump_stacks_on_signal()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert "most recent call first" in capfd.readouterr().err


def test_an_ignored_signal_stays_ignored(usr1: None) -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    assert not dump_stacks_on_signal()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
