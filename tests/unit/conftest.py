"""The unit layer's one fixture: every test starts from a clean, launcher-free process state.

The shell running pytest (a SLURM allocation, an mpirun, a CI runner) may carry launcher
variables; a unit test sets exactly the ones it is about (monkeypatch.setenv), and whatever the
code under test writes into os.environ is undone after each test.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from distrain.cluster import LegacyLaunchEnvironment


@pytest.fixture(autouse=True)
def _clean_launcher_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # tests/conftest.py scrubs the launcher variables and fails a test that leaks one; the unit
    # layer also starts without OMP_NUM_THREADS (the job layer pins it), with a plain script's
    # argv (the legacy launcher's --local-rank is stripped from sys.argv), and with the
    # class-level memory of a stripped --local-rank forgotten
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setattr(LegacyLaunchEnvironment, "_argv_local_rank", None)
    yield
