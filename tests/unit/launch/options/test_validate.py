"""launch/options/validate.py: torchrun's numeric flags and the script path, refused as one-line
errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch.options.validate import check_launch_numbers, check_script, node_range


def _args(**over: object) -> argparse.Namespace:
    values = {
        "nnodes": "1:1",
        "max_restarts": 0,
        "node_rank": 0,
        "monitor_interval": 0.1,
        "launcher": "torchrun",
    }
    values.update(over)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(
    ("text", "expected"), [("1", (1, 1)), ("4", (4, 4)), ("1:4", (1, 4)), ("2:2", (2, 2))]
)
def test_node_range(text: str, expected: tuple[int, int]) -> None:
    assert node_range(text) == expected


@pytest.mark.parametrize("text", ["a", "1:2:3", "1:", "", "1.5"])
def test_node_range_refuses_malformed(text: str) -> None:
    with pytest.raises(UsageError, match="--nnodes expects N or MIN:MAX"):
        node_range(text)


@pytest.mark.parametrize("text", ["0", "3:2", "-1:2", "0:1"])
def test_node_range_refuses_impossible(text: str) -> None:
    with pytest.raises(UsageError, match="needs 1 <= MIN <= MAX nodes"):
        node_range(text)


def test_check_launch_numbers_accepts_the_defaults() -> None:
    check_launch_numbers(_args())
    check_launch_numbers(_args(nnodes="2:4", node_rank=3, max_restarts="5", monitor_interval="1"))


@pytest.mark.parametrize(
    ("over", "message"),
    [({"max_restarts": -1}, r"--max-restarts must be 0 or more \(got -1\)"),
     ({"max_restarts": "x"}, r"--max-restarts expects an integer \(got 'x'\)"),
     ({"nnodes": "2", "node_rank": 2}, r"--node-rank 2 is outside 0..1 \(--nnodes 2\)"),
     ({"node_rank": -1}, r"--node-rank -1 is outside 0..0"),
     ({"monitor_interval": "0"}, r"--monitor-interval must be a positive number of seconds"),
     ({"monitor_interval": "inf"}, r"--monitor-interval must be a positive"),
     ({"monitor_interval": "fast"}, r"--monitor-interval expects seconds \(got 'fast'\)")],
)  # fmt: skip
def test_check_launch_numbers_refuses(over: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_launch_numbers(_args(**over))


def test_check_script(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    check_script(str(script))
    with pytest.raises(UsageError, match="is a directory"):
        check_script(str(tmp_path))
    with pytest.raises(UsageError, match="script not found"):
        check_script(str(tmp_path / "missing.py"))
