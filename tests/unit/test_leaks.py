"""The suite's leak guard (tests/helpers/leaks.py) fails a test that leaks, and only that test."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from helpers import leaks

@pytest.fixture(autouse=True)
def _no_leaks():
    yield from leaks.guard()
"""

PROBES = """
import os, threading, time
import torch.distributed as dist

def test_clean(monkeypatch):
    monkeypatch.setenv("RANK", "3")  # undone by monkeypatch: not a leak

def test_leaks_a_variable():
    os.environ["RANK"] = "1"

def test_leaks_a_thread():
    threading.Thread(target=time.sleep, args=(30,), name="sleeper", daemon=True).start()

def test_leaks_a_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)

def test_after_the_leaks_starts_clean():
    assert "RANK" not in os.environ and not dist.is_initialized()
"""


def test_each_kind_of_leak_fails_its_own_test(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(PROBES))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    out = res.stdout
    assert res.returncode == 1, out[-3000:]
    assert "5 passed, 3 errors" in out, out[-3000:]
    assert "the test leaked environment: RANK: None -> '1'" in out
    assert "the test leaked threads still running: sleeper" in out
    assert "the test leaked torch.distributed's default process group still initialised" in out
    for name in ("test_clean", "test_after_the_leaks_starts_clean"):
        assert f"ERROR test_probe.py::{name}" not in out
