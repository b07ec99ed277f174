"""launch/command_line.py: the one splitter of `distrain run`'s command line, and the cases of
the scanners it replaced (plan.split_argv, forkserver's script guess, launch/cli's --replicas
test, host_options' table, replicas.group_argv and relaunch.strip_nproc: see their own test
files for the last three), each through split()."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch.command_line import UNKNOWN, run_parser, split, takes_value
from distrain.launch.fast_start.forkserver import fast_start_script
from distrain.launch.hosts.options import HOST_LIST
from distrain.launch.options.run_options import HOST_DESTS


def parts(argv: list[str]) -> tuple[list[str], list[str]]:
    command = split(argv)
    command.refuse_unknown()
    return command.launcher_argv, list(command.script_argv)


# -- plan.split_argv's cases ------------------------------------------------------------------
def test_split_at_the_first_non_option() -> None:
    assert parts(["-n", "2", "train.py", "--n", "5", "-m"]) == (
        ["-n", "2"],
        ["train.py", "--n", "5", "-m"],
    )


def test_a_flag_before_the_script_takes_no_value() -> None:
    assert parts(["-n", "2", "--dry-run", "t.py", "--n", "5"]) == (
        ["-n", "2", "--dry-run"],
        ["t.py", "--n", "5"],
    )


def test_split_at_double_dash() -> None:
    assert parts(["--dry-run", "--", "-weird.py", "x"]) == (["--dry-run"], ["-weird.py", "x"])


def test_an_attached_value_does_not_consume_the_next_token() -> None:
    assert parts(["--nproc=4", "train.py", "x"]) == (["--nproc=4"], ["train.py", "x"])
    assert split(["--nproc=4", "train.py"]).value("nproc") == "4"


def test_split_without_a_script_keeps_everything() -> None:
    assert parts(["--dry-run", "-n", "2"]) == (["--dry-run", "-n", "2"], [])
    missing = split(["--dry-run", "-n"]).options[-1]  # the parser says "expected one argument"
    assert (missing.name, missing.value, missing.takes_value) == ("-n", None, True)


def test_split_refuses_unknown_and_ambiguous_options() -> None:
    with pytest.raises(UsageError, match="unknown option --frobnicate "):
        split(["--frobnicate", "2", "train.py"]).refuse_unknown()
    # argparse's words, as torchrun's parser says them
    with pytest.raises(
        UsageError,
        match="^ambiguous option: --npr could match --nproc-per-node, --nproc_per_node, --nproc$",
    ):
        split(["--npr", "2", "train.py"]).refuse_unknown()
    with pytest.raises(UsageError, match="script options go after the script"):
        split(["--lr=3", "train.py"]).refuse_unknown()
    # kept as a switch meanwhile: a --help after it is still seen
    assert split(["--bogus", "-h"]).unknown == ["--bogus"] and split(["--bogus", "-h"]).has("help")


def test_every_spelling_of_an_option_has_one_dest() -> None:
    table = takes_value(run_parser())
    assert table["--nnodes"] == ("nnodes", True) and table["--standalone"] == ("standalone", False)
    assert table["--master_port"] == table["--master-port"] == ("master_port", True)
    assert table["-m"] == ("module", False) and table["-n"] == table["--nproc"] == ("nproc", True)
    assert table["--self-starting"] == table["--no-self-starting"] == ("self_starting", False)
    assert table["-H"] == table["--hosts"] == ("hosts", True) and table["-x"] == ("forward", True)
    assert {dest for dest, _ in table.values()} >= set(HOST_DESTS)
    assert UNKNOWN not in {dest for dest, _ in table.values()}


def test_parser_defaults_fast_start_and_forwards_sigusr1() -> None:
    args = run_parser().parse_args(["x.py"])
    assert args.start_method == "fast"
    assert "SIGUSR1" in args.signals_to_handle.split(",")
    assert args.launcher == "torchrun"


def test_the_fan_outs_options_stay_out_of_the_one_node_help() -> None:
    text = run_parser().format_help()
    assert "--nproc" in text and "--quiet-hosts" not in text and "--ssh-opts" not in text


# -- forkserver._script_from_argv's cases -----------------------------------------------------
def test_the_script_to_fork_is_the_split_ones(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    other = tmp_path / "other.py"
    other.write_text("import torch\n")
    s = str(script)
    assert fast_start_script(split(["-n", "2", s, "--x"])) == s
    assert fast_start_script(split(["--start-method=forkserver", s])) == s
    assert fast_start_script(split([str(tmp_path / "missing.py")])) is None
    for flags in (
        ["-m"],
        ["--no-python"],
        ["--dry-run"],
        ["-h"],
        ["--start-method", "spawn"],
        ["--start_method=fork"],
        ["--replicas", "2"],  # each group's own launcher forks
        ["--launcher", "mpirun"],
        ["--bogus"],  # the plan refuses the command line
    ):
        assert fast_start_script(split([*flags, s])) is None, flags
    # the guess took the first existing .py file, an option's value included
    assert fast_start_script(split(["--run-dir", str(other), s])) == s
    # the script's own options are not the launcher's
    assert fast_start_script(split([s, "-m", "--dry-run", "--replicas", "2"])) == s


# -- launch/cli.py's --replicas test, host_options.wants_hosts --------------------------------
@pytest.mark.parametrize(
    ("argv", "replicas"),
    [(["--replicas", "2", "t.py"], True), (["--replicas=2", "t.py"], True),
     (["--cpu", "--replicas", "2", "t.py"], True),
     (["t.py", "--replicas", "2"], False),  # the script's own option: it scanned every token
     (["--run-dir", "--replicas", "t.py"], False)],  # a value, not an option
)  # fmt: skip
def test_replicas_is_an_option_before_the_script(argv: list[str], replicas: bool) -> None:
    assert split(argv).has("replicas") is replicas


@pytest.mark.parametrize(
    ("argv", "hosts"),
    [(["-n", "2", "--hosts=a,b", "x.py"], True), (["-H", "a,b", "x.py"], True),
     (["--hostfile", "f", "x.py"], True), (["-n", "2", "x.py", "--hosts", "a"], False),
     (["--bogus", "--hosts", "a", "x.py"], True)],
)  # fmt: skip
def test_hosts_are_an_option_before_the_script(argv: list[str], hosts: bool) -> None:
    assert split(argv).has(*HOST_LIST) is hosts


def test_a_tool_splits_with_its_own_parser() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("-n", "--nproc")
    parser.add_argument("--json", action="store_true")
    command = split(["--json", "-n", "4", "--json"], parser)
    assert command.value("nproc") == "4" and command.argv_without("nproc") == ["--json", "--json"]


def test_a_tool_keeps_its_leading_positionals_and_the_script_follows_the_separator() -> None:
    tool = argparse.ArgumentParser()
    tool.add_argument("target")
    tool.add_argument("script")
    tool.add_argument("--port")
    argv = ["slurm", "--port", "1", "train.py", "--", "--lr", "1"]
    command = split(argv, tool, leading=2)
    assert command.launcher_argv == ["slurm", "--port", "1", "train.py"]
    assert list(command.script_argv) == ["--lr", "1"]
    assert tool.parse_args(command.launcher_argv).script == "train.py"
    # without `leading` the first positional already starts the script, as for `distrain run`
    assert split(argv, tool).script_argv == tuple(argv)


def test_with_values_rebuilds_each_option_in_the_form_given() -> None:
    command = split(["--master-addr", "@A@", "--rdzv-endpoint=@A@:1", "-n", "2", "t.py", "@A@"])
    filled = command.with_values(lambda o: o.value.replace("@A@", "h") if o.value else None)
    assert filled.launcher_argv == ["--master-addr", "h", "--rdzv-endpoint=h:1", "-n", "2"]
    assert filled.script_argv == ("t.py", "@A@")  # the script's own arguments are its own


def test_with_values_keeps_whether_the_script_came_after_the_separator() -> None:
    command = split(["--master-addr", "@A@", "--", "t.py"])
    assert command.separated and command.with_values(lambda o: "h").separated


# -- torchrun's abbreviations, and the option meant ---------------------------------------------
@pytest.mark.parametrize(
    ("argv", "launcher"),
    [
        (["--max-restart", "3", "t.py", "--max"], ["--max-restarts", "3"]),
        (["--max-restart=3", "t.py"], ["--max-restarts=3"]),
        (["--standal", "--nproc-per", "2", "t.py"], ["--standalone", "--nproc-per-node", "2"]),
        (["--wat", "9", "t.py"], ["--watchdog", "9"]),  # distrain's own, by the same rule
    ],
)
def test_an_unambiguous_prefix_is_the_option_in_full(argv: list[str], launcher: list[str]) -> None:
    command = split(argv)
    assert command.launcher_argv == launcher and command.unknown == []
    assert command.script_argv[1:] == tuple(argv[argv.index("t.py") + 1 :])  # the script's own


def test_the_expanded_option_is_torchruns() -> None:
    from torch.distributed.run import get_args_parser

    # what torchrun itself makes of the same tokens
    assert get_args_parser().parse_args(["--max-restart", "3", "t.py"]).max_restarts == 3
    parsed = run_parser().parse_args([*split(["--max-restart", "3", "t.py"]).launcher_argv, "t"])
    assert parsed.max_restarts == 3


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--nprocs", "--nproc"),
        ("--max-restrats", "--max-restarts"),
        ("--nproc_per_nodes", "--nproc-per-node"),
        ("--dryrun", "--dry-run"),
        ("-N", "-n"),
    ],
)
def test_an_unknown_option_names_the_nearest(typed: str, meant: str) -> None:
    with pytest.raises(UsageError, match=f"^unknown option {typed}: did you mean {meant}\\? "):
        split([typed, "2", "train.py"]).refuse_unknown()


def test_a_tool_that_refuses_abbreviations_gets_none() -> None:
    for allow in (False, True):
        parser = argparse.ArgumentParser(allow_abbrev=allow)
        parser.add_argument("--nnodes")
        expected = ["--nnodes", "2"] if allow else ["--nn"]
        assert split(["--nn", "2", "t.py"], parser).launcher_argv == expected


# -- the readers of other lines, here rather than walked by their callers --------------------


def test_the_script_tail_and_torchruns_separator() -> None:
    """A script that looks like an option follows ``--``; torchrun's line wants one before
    script arguments that look like options."""
    from distrain.launch.command_line import any_option, script_tail

    assert script_tail(["-x.py", "a"]) == ["--", "-x.py", "a"]
    assert script_tail(["t.py", "--lr"]) == ["t.py", "--lr"]
    assert script_tail([]) == []
    assert any_option(["1", "--lr"]) and not any_option(["1", "a"])


def test_option_values_of_a_script_line() -> None:
    """Values in both forms, in order, once; none taken from a word that looks like an option."""
    from distrain.launch.command_line import option_values

    def wanted(name: str) -> bool:
        return name in ("--out", "--save")

    args = ["--out=o", "--lr", "1", "--save", "s", "--out", "o", "--save", "--x", "--out"]
    assert option_values(args, wanted) == ["o", "s"]
    assert option_values(["--outdir", "d", "pos", "--out="], wanted) == []
