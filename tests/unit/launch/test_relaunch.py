"""launch/relaunch.py: the argv a tool passes to its relaunched workers has no -n/--nproc left."""

from __future__ import annotations

import pytest

from distrain.launch.relaunch import strip_nproc


@pytest.mark.parametrize(
    ("argv", "expected"),
    [(["-n", "2", "--json"], ["--json"]),
     (["--json", "--nproc", "4", "--timeout", "3"], ["--json", "--timeout", "3"]),
     (["--nproc=4", "-n=2", "--x"], ["--x"]),
     (["--ops", "all_reduce"], ["--ops", "all_reduce"]),
     (["--json", "-n"], ["--json"])],
)  # fmt: skip
def test_strip_nproc(argv: list[str], expected: list[str]) -> None:
    assert strip_nproc(argv) == expected
