"""launch/relaunch.py: the argv a tool passes to its relaunched workers has no -n/--nproc left
(split by the tool's own parser, launch/command_line.split)."""

from __future__ import annotations

import pytest

from distrain.launch.relaunch import HOST_DESTS, NPROC_DEST, tool_argv
from distrain.tools.bench.comm import _parser as comm_parser
from distrain.tools.doctor.cli import _parser as doctor_parser


@pytest.mark.parametrize(
    ("argv", "expected"),
    [(["-n", "2", "--json"], ["--json"]),
     (["--json", "--nproc", "4", "--timeout", "3"], ["--json", "--timeout", "3"]),
     (["--nproc=4", "-n=2", "--json"], ["--json"]),
     (["--local", "--master-port", "-n"], ["--local", "--master-port", "-n"]),  # a value, not -n
     (["--json", "-n"], ["--json"])],
)  # fmt: skip
def test_doctor_argv_without_nproc(argv: list[str], expected: list[str]) -> None:
    assert tool_argv(argv, doctor_parser()) == expected


def test_doctor_argv_on_hosts_without_the_host_options() -> None:
    argv = ["--hosts", "a,b", "-n", "2", "--ssh-opts", "-F cfg", "--json"]
    assert tool_argv(argv, doctor_parser(), NPROC_DEST + HOST_DESTS) == ["--json"]
    assert tool_argv(argv, doctor_parser()) == ["--hosts", "a,b", "--ssh-opts", "-F cfg", "--json"]


def test_bench_comm_argv_without_nproc() -> None:
    assert tool_argv(["--ops", "all_reduce", "-n", "2"], comm_parser()) == ["--ops", "all_reduce"]
