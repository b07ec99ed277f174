"""worker/lifecycle/root_cause.py: the agent's error file through torch's ErrorHandler."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, ProcessFailure

from distrain.settings import Settings
from distrain.worker.lifecycle import failure
from distrain.worker.lifecycle.root_cause import RootCause


def _raised_in_train() -> KeyError:
    def train() -> None:
        raise KeyError("lr")

    try:
        train()
    except KeyError as err:
        return err
    raise AssertionError("train() raised nothing")


def test_an_exception_not_being_handled_keeps_its_own_traceback(tmp_path: Path) -> None:
    """As in an excepthook: torch's base would record ``format_exc()``, here 'NoneType: None'."""
    err = _raised_in_train()
    assert sys.exc_info()[0] is None
    path = str(tmp_path / "error.json")
    RootCause(path).record_exception(err)
    assert isinstance(RootCause(path), ErrorHandler)
    extra = json.loads(Path(path).read_text())["message"]["extraInfo"]
    assert "in train" in extra["py_callstack"] and "KeyError: 'lr'" in extra["py_callstack"]
    # what torch's agent reads as the rank's root cause
    read = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=path)
    assert read.message["message"] == "KeyError: 'lr'"


def test_a_cause_known_by_its_line_reads_as_the_agent_reads_an_exception(tmp_path: Path) -> None:
    """A fresh interpreter's last line, a refusal, a watch's verdict: the same JSON."""
    path = str(tmp_path / "error.json")
    failure.write_cause(path, "distrain: the script's children failed", "")
    read = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=path)
    assert read.message["message"] == "distrain: the script's children failed"


def test_the_worker_s_error_file_is_the_agent_s_root_cause(tmp_path: Path) -> None:
    """failure.write_error_file (the excepthook's) in a process that imported torch."""
    path = str(tmp_path / "error.json")
    settings = Settings.read({"TORCHELASTIC_ERROR_FILE": path})
    err = _raised_in_train()
    failure.write_error_file(path, err, err.__traceback__, settings)
    read = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=path)
    assert read.message["message"] == "KeyError: 'lr'"
    assert "in train" in json.loads(Path(path).read_text())["message"]["extraInfo"]["py_callstack"]
