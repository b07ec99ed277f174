"""launch/options/usage.py: the usage errors `distrain run` finds before ``import torch`` are the
ones plan() finds after it, in the same words; a command line plan() takes passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch.command_line import parser_without_torch, read_command_line
from distrain.launch.options.usage import check_before_torch
from distrain.launch.plan import plan

pytestmark = pytest.mark.skipif(
    parser_without_torch() is None, reason="the recorded torchrun table is another torch's"
)


def refusal(check: object, argv: list[str]) -> str | None:
    try:
        check(read_command_line(argv))  # type: ignore[operator]
    except UsageError as err:
        return str(err)
    return None


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


BAD = [
    ["--frobnicate", "S"],
    ["--nprocs", "2", "S"],
    ["--max", "3", "S"],
    ["--max-restarts", "x", "S"],
    ["--monitor-interval", "soon", "S"],
    ["--start-method", "quick", "S"],
    ["--launcher", "srun", "S"],
    ["--numa-binding", "all", "S"],
    ["-n", "two", "S"],
    ["-n", "0", "S"],
    ["-n", "2"],
    ["-n", "2", "no/such/train.py"],
    ["-n", "2", "/"],
    [],
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a) or "nothing")
def test_refused_before_torch_as_after_it(argv: list[str], script: str) -> None:
    argv = [script if tok == "S" else tok for tok in argv]
    early = refusal(check_before_torch, argv)
    assert early is not None
    assert early == refusal(plan, argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["-n", "2", "S", "--frobnicate", "--max"],  # the script's own options
        ["--max-restart", "3", "--nproc", "auto", "S"],
        ["-m", "no.such.module"],  # a module: found by the worker
        ["--no-python", "echo", "hi"],
        ["--hosts", "a,b", "--dry-run", "S"],  # the fan-out checks the rest itself
        ["--frobnicate", "--help"],  # help wins, as in plan()
    ],
)
def test_what_plan_takes_passes(argv: list[str], script: str) -> None:
    argv = [script if tok == "S" else tok for tok in argv]
    assert refusal(check_before_torch, argv) is None


def test_the_fan_out_still_refuses_unknown_options() -> None:
    with pytest.raises(UsageError, match="did you mean --nproc"):
        read_command_line(["--hosts", "a,b", "--nprocs", "2", "t.py"])
