"""Fixtures the real-process tests share (the helpers themselves are in tests/helpers/)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.netns_hosts import Hosts, make_hosts


@pytest.fixture
def hosts2() -> Iterator[Hosts]:
    """Two network-namespace hosts on one bridge, removed afterwards."""
    with make_hosts(2) as hosts:
        yield hosts
