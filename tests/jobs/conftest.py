"""Fixtures the real-process tests share (the helpers themselves are in tests/helpers/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.netns_hosts import Hosts, make_hosts


@pytest.fixture
def hosts2() -> Iterator[Hosts]:
    """Two network-namespace hosts on one bridge, removed afterwards."""
    with make_hosts(2) as hosts:
        yield hosts


@pytest.fixture
def mem_root(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs folder of this test's own for the memory tier (removed after it, whatever
    happened)."""
    root = Path("/dev/shm") / f"dtest-mem-{os.getpid()}-{tmp_path.name}"
    root.mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)
