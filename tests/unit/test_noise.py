"""distrain/noise.py: the list of torch's and TorchFT's known lines matches exactly; debug: all."""

from __future__ import annotations

import logging

import pytest

from distrain import noise


def _record(name: str, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_known_lines_are_matched_and_nothing_else() -> None:
    assert noise.known(
        "torch.multiprocessing.spawn", "Terminating process 32428 via signal SIGTERM"
    )
    assert noise.known("torch.distributed.elastic.multiprocessing.api",
                       "failed (exitcode: -9) local_rank: 1 (pid: 379) of fn: run_script "
                       "(start_method: forkserver)")  # fmt: skip
    assert noise.known(
        "torchft.manager",
        "[distrain_0:959b/0 - step 24] got exception waiting for work [...] Read error",
    )
    # unknown lines, or known text on another logger, are never hidden
    assert not noise.known(
        "torch.multiprocessing.spawn",
        "Unable to shutdown process 7 via SIGTERM, forcefully exiting via SIGKILL",
    )
    assert not noise.known(
        "torchft.manager", "[distrain_0/0 - step 3] got exception in pg configure: boom"
    )
    assert not noise.known("torch.distributed.elastic.agent.server.api", "failed (exitcode: 1)")


def test_filter_drops_known_records_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    f = noise.KnownNoise()
    known = _record("torch.multiprocessing.spawn", "Terminating process %s via signal SIGTERM", 7)
    other = _record("torch.multiprocessing.spawn", "something new %s", 7)
    monkeypatch.delenv("DISTRAIN_LOG_LEVEL", raising=False)
    assert not f.filter(known) and f.filter(other)
    monkeypatch.setenv("DISTRAIN_LOG_LEVEL", "debug")
    assert f.filter(known) and f.filter(other)


def test_every_known_warning_says_why() -> None:
    assert noise.KNOWN_WARNINGS and all(len(why) > 20 for _, _, why in noise.KNOWN_WARNINGS)


def test_the_agents_death_signal_and_c10ds_reverse_dns_warning_are_known() -> None:
    agent = "torch.distributed.elastic.agent.server.api"
    for sig in ("15", "Signals.SIGTERM", "SIGINT"):
        assert noise.known(agent, f"Received {sig} death signal, shutting down workers")
    assert not noise.known(agent, "Received 15 death signal, shutting down workers and more")
    assert not noise.known("torch.distributed.elastic.multiprocessing.api", "Received 15 death "
                           "signal, shutting down workers")  # fmt: skip
    line = ("[W1128 20:59:25.951000 29560 torch/csrc/distributed/c10d/socket.cpp:474] [c10d] The "
            "hostname of the client socket cannot be retrieved. err=-3")  # fmt: skip
    assert noise.known_cpp(line) and not noise.known_cpp("[c10d] The client socket has timed out")


def test_the_agents_logger_drops_its_death_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISTRAIN_LOG_LEVEL", raising=False)
    record = _record(
        "torch.distributed.elastic.agent.server.api",
        "Received %s death signal, shutting down workers",
        15,
    )
    noise.quiet_loggers()
    assert not logging.getLogger(record.name).filter(record)
