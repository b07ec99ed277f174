"""worker/fast_start/as_exec.py and process/lineage.ignored_signals: the dispositions an exec'd
worker has (the jobs that compare them with torchrun's: tests/jobs/test_fidelity_probe.py)."""

from __future__ import annotations

import signal
from pathlib import Path

from distrain.process.lineage import ignored_signals
from distrain.worker.fast_start.as_exec import agent_handles, exec_dispositions

AGENT = agent_handles("SIGTERM,SIGINT,SIGHUP,SIGQUIT")


def test_what_the_agent_handles_reaches_the_worker_as_default() -> None:
    # a background job's SIGINT/SIGQUIT and nohup's SIGHUP: the agent handles them, exec resets
    wanted = exec_dispositions([signal.SIGINT, signal.SIGQUIT, signal.SIGHUP], AGENT)
    assert wanted[signal.SIGINT] is signal.default_int_handler  # Python's own, at start
    assert wanted[signal.SIGQUIT] == wanted[signal.SIGHUP] == signal.SIG_DFL


def test_what_the_launcher_ignores_and_the_agent_does_not_stays_ignored() -> None:
    wanted = exec_dispositions([signal.SIGUSR2, signal.SIGTTOU], AGENT)
    assert wanted[signal.SIGUSR2] == wanted[signal.SIGTTOU] == signal.SIG_IGN
    assert wanted[signal.SIGUSR1] == wanted[signal.SIGCHLD] == signal.SIG_DFL
    # a fresh interpreter ignores these itself; SIGINT ignored by an agent that does not handle
    # it stays ignored (Python keeps an inherited SIG_IGN)
    assert wanted[signal.SIGPIPE] == wanted[signal.SIGXFSZ] == signal.SIG_IGN
    assert exec_dispositions([signal.SIGINT], agent_handles("SIGTERM"))[signal.SIGINT] == (
        signal.SIG_IGN
    )
    assert signal.SIGKILL not in wanted and signal.SIGSTOP not in wanted


def test_an_empty_agent_list_is_torchs_default() -> None:
    assert agent_handles("") == AGENT
    assert agent_handles("SIGTERM, SIGBOGUS") == {signal.SIGTERM}


def test_ignored_signals_read_the_kernels_mask(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001006\n")
    assert ignored_signals(str(status)) == (2, 3, 13, 25)  # INT, QUIT, PIPE, XFSZ
    assert signal.SIGPIPE in ignored_signals()  # this interpreter's own, read from /proc
