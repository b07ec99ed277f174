"""launch/hosts/ssh.py reads ssh's options as ssh does, and writes each node's line so that the
node reads its script back: both through a parser, never by hand."""

from __future__ import annotations

import pytest

from distrain.launch.command_line import split
from distrain.launch.hosts import options as host_options, ssh as ssh_hosts


@pytest.mark.parametrize(
    ("ssh_opts", "config"),
    [
        ([], "~/.ssh/config"),
        (["-F", "a", "-p", "22", "-Fb"], "b"),  # the last one, either spelling
        (["-vF", "c"], "c"),  # after a switch, in one word (getopt)
        (["-o", "-Fz"], "~/.ssh/config"),  # -o's value, not a -F
        (["-i", "-F"], "~/.ssh/config"),  # a key file named -F
        (["-F"], "~/.ssh/config"),  # ssh refuses it: no file read
    ],
)
def test_the_config_file_is_the_one_ssh_reads(ssh_opts: list[str], config: str) -> None:
    assert ssh_hosts.config_file(ssh_opts) == config


def test_a_script_that_looks_like_an_option_reaches_every_node_as_the_script() -> None:
    """The node line puts `--` before such a script, and host_node's reading gets it back."""
    opts = host_options.parse(split(["--hosts", "a:1,b:1", "--", "-weird.py", "--lr", "1"]))
    node_argv = ssh_hosts.node_argv(opts, 1, "job")
    assert node_argv[-4:] == ["--", "-weird.py", "--lr", "1"]
    assert split(node_argv).script_argv == ("-weird.py", "--lr", "1")
    plain = ssh_hosts.node_argv(host_options.parse(split(["--hosts", "a:1,b:1", "t.py"])), 1, "j")
    assert plain[-1] == "t.py" and "--" not in plain
