"""cli.py: the `distrain` command's dispatch: help, version, unknown commands, subcommand exits."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from distrain import __version__, cli


def test_no_arguments_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: distrain {run,doctor,bench,top,export} ...")


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    assert "  export   generate a Dockerfile" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"distrain {__version__}\n"


def test_unknown_command_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train"]) == 2
    assert (
        capsys.readouterr().err
        == "distrain: error: unknown command 'train' (choose from run, doctor, "
        "bench, top, export)\n"
    )


def test_a_subcommand_gets_the_rest_of_argv_and_sets_the_exit_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []
    monkeypatch.setitem(
        sys.modules,
        "distrain._unit_fake_command",
        SimpleNamespace(main=lambda argv: seen.append(argv) or 5),
    )
    monkeypatch.setitem(cli.COMMANDS, "fake", ("distrain._unit_fake_command", "a stand-in"))
    assert cli.main(["fake", "--run", "x.py", "--help"]) == 5
    assert seen == [["--run", "x.py", "--help"]]


@pytest.mark.parametrize("first", ["-hx", "--help=1", "--hel", "--vers", "--", "-"])
def test_only_a_whole_switch_is_one(first: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--hel`` is not ``--help`` (no abbreviation), nor ``--help=1``: unknown commands."""
    assert cli.main([first, "run"]) == 2
    assert capsys.readouterr().err.startswith(f"distrain: error: unknown command {first!r}")


def test_a_switch_after_the_command_is_the_command_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """``distrain run --help``: the first word only is read here."""
    called: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(cli, "run_subcommand", lambda m, rest: called.append((m, rest)) or 0)
    assert cli.main(["run", "--help", "--version"]) == 0
    assert called == [("distrain.launch.cli", ["--help", "--version"])]
    assert cli.first_word_is(["-h", "run"], "-h", "--help")
