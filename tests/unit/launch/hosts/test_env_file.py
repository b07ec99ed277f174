"""`distrain run --hosts`: NAME=VALUE files exported on every host, as DeepSpeed's .deepspeed_env
(launch/hosts/env_file.py); tests/jobs/test_hosts_env.py checks a variable arrives on a real ssh
host."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch.command_line import split
from distrain.launch.hosts import env_file, options as host_options, ssh as ssh_hosts


def test_lines_comments_export_and_quotes() -> None:
    text = "# a comment\n\nA=1\nexport B='two words'\nC=x=y\nD=\"q\"\nE=\n  F = no\n"
    with pytest.raises(UsageError, match=r"^f:8: 'F = no' is not NAME=VALUE$"):
        env_file.parse(text, "f")
    assert env_file.parse(text.replace("  F = no\n", ""), "f") == {
        "A": "1",
        "B": "two words",
        "C": "x=y",
        "D": "q",
        "E": "",
    }


@pytest.mark.parametrize("line", ["NOEQUALS", "1A=2", "=v", "A-B=1", "export =1"])
def test_a_bad_line_is_one_error_naming_file_and_line(line: str) -> None:
    with pytest.raises(UsageError, match=r"^/x/.distrain_env:2: .* is not NAME=VALUE$"):
        env_file.parse(f"OK=1\n{line}\n", "/x/.distrain_env")


def test_home_then_working_directory_distrain_over_deepspeed(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    (home / ".deepspeed_env").write_text("A=home-ds\nB=home-ds\nC=home-ds\nD=home-ds\n")
    (home / ".distrain_env").write_text("B=home\nC=home\nD=home\n")
    (cwd / ".deepspeed_env").write_text("C=work-ds\nD=work-ds\n")
    (cwd / ".distrain_env").write_text("D=work\n")
    found, used = env_file.load(str(cwd), str(home))
    assert found == {"A": "home-ds", "B": "home", "C": "work-ds", "D": "work"}
    assert used == [str(home / n) for n in env_file.NAMES] + [str(cwd / n) for n in env_file.NAMES]
    assert env_file.load(str(home), str(home))[1] == [str(home / n) for n in env_file.NAMES]
    assert env_file.load(str(tmp_path), str(tmp_path)) == ({}, [])


def test_command_line_over_files_over_the_default_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    (tmp_path / ".distrain_env").write_text("NCCL_DEBUG=file\nFROM_FILE=1\nGIVEN=file\n")
    opts = host_options.parse(split(["--hosts", "a,b", "-x", "GIVEN=cli", "train.py"]))
    env = ssh_hosts.forwarded_env(opts, {"NCCL_DEBUG": "here", "OTHER": "no"})
    assert env == {"NCCL_DEBUG": "file", "FROM_FILE": "1", "GIVEN": "cli"}
    (tmp_path / ".distrain_env").write_text("oops\n")
    with pytest.raises(UsageError, match=r"\.distrain_env:1: 'oops' is not NAME=VALUE"):
        host_options.parse(split(["--hosts", "a,b", "train.py"]))
