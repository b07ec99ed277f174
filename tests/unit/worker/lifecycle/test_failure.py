"""lifecycle/failure.py: which errors only say "a peer went away" (not reported as the cause)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from types import TracebackType

import pytest

from distrain.checkpoint.files import CheckpointError
from distrain.cluster import ClusterError
from distrain.errors import DistrainError, UsageError, recurring
from distrain.net import split_endpoint
from distrain.process import patching
from distrain.settings import Settings
from distrain.tools.top.status import NoJobError
from distrain.worker.lifecycle import failure, root_cause
from distrain.worker.lifecycle.failure import is_peer_failure, is_peer_failure_line
from distrain.worker.lifecycle.stop_job import stop_the_job

Hook = Callable[[type[BaseException], BaseException, TracebackType | None], None]


@pytest.mark.parametrize(
    "text",
    [
        "[gloo] Connection reset by peer",
        "Broken pipe",
        "Connection closed by peer",
        "Socket Timeout",
        "Connection refused",
    ],
)
def test_runtime_errors_about_lost_peers(text: str) -> None:
    assert is_peer_failure(RuntimeError(text)) is True


def test_other_errors_are_the_scripts_own() -> None:
    assert is_peer_failure(RuntimeError("CUDA out of memory")) is False
    assert (
        is_peer_failure(ValueError("Connection reset by peer")) is False
    )  # only gloo's untyped RuntimeErrors are read
    # RuntimeErrors only since they are DistrainErrors: their type says they are distrain's own
    assert is_peer_failure(UsageError("Connection refused")) is False
    assert is_peer_failure(NoJobError("Connection refused")) is False
    assert is_peer_failure(DistrainError("Connection refused")) is False


def test_torch_distributed_types_decide_without_the_text() -> None:
    import torch.distributed as dist

    assert is_peer_failure(dist.DistNetworkError("anything")) is True
    assert is_peer_failure(dist.DistStoreError("wait timeout")) is True
    # a backend's error is a peer's only when its text says so (NCCL's own faults are causes)
    assert is_peer_failure(dist.DistBackendError("NCCL error: unhandled cuda error")) is False
    assert is_peer_failure(dist.DistBackendError("[pair.cc:561] Connection closed by peer"))


@pytest.mark.parametrize(
    ("line", "peer"),
    [
        ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes.", True),
        ("DistStoreError: wait timeout after 30000ms", True),
        ("RuntimeError: [../gloo/transport/tcp/pair.cc:561] Connection closed by peer", True),
        ("torch.distributed.DistBackendError: NCCL error: remote process exited", False),
        ("ValueError: Connection refused", False),
        ("distrain.errors.UsageError: Connection refused", False),
        ("RuntimeError: CUDA out of memory", False),
        ("Connection closed by peer", False),
    ],
)
def test_a_cause_line_from_another_process_is_classified_by_its_type(line: str, peer: bool) -> None:
    assert is_peer_failure_line(line) is peer


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hook]:
    """failure.install()'s excepthook over the plain one; the signal handlers it resets come back"""
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    monkeypatch.setattr(patching, "APPLIED", [])  # whatever an earlier test registered
    monkeypatch.setattr(patching, "_uncaught", {})
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    failure.install(0, Settings())
    yield sys.excepthook
    patching.restore("failure")  # the registry's excepthook goes with its last handler
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _uncaught(hook: Hook, err: BaseException) -> None:
    try:
        raise err
    except BaseException as raised:
        hook(type(raised), raised, raised.__traceback__)


def test_a_distrain_error_is_one_line(hook: Hook, capfd: pytest.CaptureFixture[str]) -> None:
    _uncaught(hook, DistrainError("fp16 needs a GPU"))
    assert capfd.readouterr().err == "distrain: error: fp16 needs a GPU\n"


@pytest.mark.parametrize(
    "err", [UsageError("bad option"), ClusterError("RANK is not set"), NoJobError("no job")]
)
def test_its_other_kinds_keep_their_traceback(
    hook: Hook, capfd: pytest.CaptureFixture[str], err: DistrainError
) -> None:
    _uncaught(hook, err)
    out = capfd.readouterr().err
    assert (
        out.startswith("[rank0]: Traceback (most recent call last):")
        and "distrain: error:" not in out
    )
    assert out.rstrip().endswith(f"{type(err).__name__}: {err}")


# -- an error that every restart would repeat: the job is stopped, not restarted ----------------
@pytest.mark.parametrize(
    ("err", "stops"),
    [
        (recurring(CheckpointError("saved global batch 64 != current 128")), True),
        (UsageError("bad option"), True),
        (ClusterError("RANK is not set"), True),
        (DistrainError("rank 0 did not say which attempt this is"), False),
        (CheckpointError("background checkpoint failed: OSError: No space left"), False),
        (RuntimeError("CUDA out of memory"), False),
    ],
)
def test_only_a_recurring_error_stops_the_job(
    hook: Hook, monkeypatch: pytest.MonkeyPatch, err: BaseException, stops: bool
) -> None:
    reasons: list[str] = []
    monkeypatch.setattr(failure, "stop_the_job", lambda reason, settings: reasons.append(reason))
    _uncaught(hook, err)
    assert reasons == ([f"rank 0: {type(err).__name__}: {err}"] if stops else [])


def test_without_a_c10d_endpoint_there_is_nothing_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    assert stop_the_job("rank 0: UsageError: x", Settings.read({})) is False


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [("10.0.0.1:29400", ("10.0.0.1", 29400)), ("[::1]:5", ("::1", 5)), ("node0", ("node0", 29400))],
)
def test_an_endpoint_is_split_as_torch_does(endpoint: str, expected: tuple[str, int]) -> None:
    assert split_endpoint(endpoint) == expected


def test_cause_line_of_a_self_started_childs_failure_is_the_childs() -> None:
    from torch.multiprocessing.spawn import ProcessRaisedException

    msg = (
        "\n\n-- Process 1 terminated with the following error:\nTraceback (most "
        "recent call last):\n"
        '  File "train.py", line 3, in worker\nRuntimeError: child 1 failed\n'
    )
    assert (
        root_cause.cause_line(ProcessRaisedException(msg, 1, 42)) == "RuntimeError: child 1 failed"
    )
    assert root_cause.cause_line(KeyError("lr")) == "KeyError: 'lr'"


def test_report_uncaught_writes_the_error_file_under_torchs_hook(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch's init_process_group installs its own [rankN] hook, which writes no error file
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, err, tb: seen.append(err))
    settings = Settings.read({"TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json")})
    err = KeyError("the cause")
    failure.report_uncaught(err, settings)
    assert seen == [err] and "KeyError: 'the cause'" in (tmp_path / "error.json").read_text()
    (tmp_path / "error.json").unlink()
    failure.report_uncaught(
        RuntimeError("Connection reset by peer"), settings
    )  # a peer's failure: no file
    assert not (tmp_path / "error.json").exists()
