"""`distrain run --hosts` with IPv6 addresses: brackets in host lists, hostfiles and
--include/--exclude, ssh's address family, the rendezvous endpoint's brackets, and the one line
for an IPv6 master (a job's nodes pick IPv4 interfaces)."""

from __future__ import annotations

import json
import shlex
import threading
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch.command_line import split
from distrain.launch.hosts import (
    go as host_go,
    options as host_options,
    run as hosts_run,
    ssh as ssh_hosts,
)
from distrain.launch.hosts.hostfile import HostSpec, parse_hostfile_text, parse_hosts, select
from distrain.launch.hosts.node import PROBE_MARK, fingerprint


def test_ipv6_hosts_in_lists_hostfiles_and_selections() -> None:
    assert parse_hosts("[fd00::2]:2,[fd00::3],fd00::4,h1:3") == [
        HostSpec("fd00::2", 2),
        HostSpec("fd00::3"),
        HostSpec("fd00::4"),
        HostSpec("h1", 3),
    ]
    assert parse_hostfile_text("fd00::2 slots=2\n[fd00::3] slots=4 # gpu box\n") == [
        HostSpec("fd00::2", 2),
        HostSpec("fd00::3", 4),
    ]
    hosts = parse_hosts("[fd00::2]:4,h1:4")
    assert select(hosts, "[fd00::2]:0,1@h1", None) == [
        HostSpec("fd00::2", 4, (0, 1)),
        HostSpec("h1", 4),
    ]
    assert select(hosts, None, "fd00::2") == [HostSpec("h1", 4)]


@pytest.mark.parametrize("text", ["[fd00::2:2", "[h1]:2", "[]:2", "[fd00::2]x"])
def test_bad_brackets_are_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"is not a host name$"):
        parse_hosts(text)


def test_ssh_gets_the_bare_address_and_its_family() -> None:
    opts = host_options.parse(split(["--hosts", "[fd00::2]:1,[fd00::3]:1", "t.py"]))
    assert ssh_hosts.ssh_argv(opts, opts.hosts[0].name, "true")[-2] == "fd00::2"
    assert ssh_hosts.resolve(opts) == ["fd00::2", "fd00::3"]
    # the first host routes to the second; ::1 is loopback as 127.x is
    assert json.loads(ssh_hosts.route_line(["fd00::2", "::1", "fd00::3"])) == {
        "route_to": "fd00::3"
    }
    v4 = host_options.parse(split(["--hosts", "[fd00::2]:1", "--ssh-opts", "-4", "t.py"]))
    with pytest.raises(UsageError, match=r"^unknown host fd00::2"):
        ssh_hosts.resolve(v4)  # ssh -4 would never reach it


def test_the_rendezvous_endpoint_brackets_an_ipv6_master() -> None:
    opts = host_options.parse(split(["--hosts", "a:1,b:1", "--nnodes", "1:2", "t.py"]))
    argv = ssh_hosts.node_argv(opts, 1, "job")
    filled = host_go.fill(
        split(argv), {"master_addr": "fd00::2", "master_port": 29400}
    ).launcher_argv
    assert filled[filled.index("--rdzv-endpoint") + 1] == "[fd00::2]:29400"
    static = ssh_hosts.node_argv(host_options.parse(split(["--hosts", "a:1,b:1", "t.py"])), 1, "j")
    filled = host_go.fill(
        split(static), {"master_addr": "fd00::2", "master_port": 29400}
    ).launcher_argv
    assert filled[filled.index("--master-addr") + 1] == "fd00::2"


def test_an_ipv6_master_is_one_line_asking_for_an_ipv4_interface() -> None:
    opts = host_options.parse(split(["--hosts", "a:1,b:1", "t.py"]))
    sessions = []
    for name in ("a", "b"):
        reply = {**fingerprint(), "gpus": 0, "cwd": "/w", "script_ok": True, "address": "fd00::2",
                 "address_error": None, "port": 29500, "port_error": None}  # fmt: skip
        line = shlex.quote(PROBE_MARK + json.dumps(reply))
        sessions.append(
            hosts_run.Session(name, ["sh", "-c", f"echo {line}; cat >/dev/null"], False)
        )
    try:
        with pytest.raises(UsageError) as err:
            hosts_run._check(sessions, opts, threading.Event())
    finally:
        hosts_run._stop(sessions)
    assert str(err.value) == (
        "host a: the others reach it at IPv6 fd00::2, but a job's nodes talk IPv4: "
        "give --iface NAME, an interface with an IPv4 address"
    )


@pytest.mark.parametrize("form", ["-F {cfg}", "-F{cfg}"])
def test_an_unknown_host_names_the_ssh_config_read(tmp_path: Path, form: str) -> None:
    cfg = tmp_path / "my ssh config"
    cfg.write_text("Host other\n  HostName 127.0.0.1\n")
    ssh_opts = form.format(cfg=shlex.quote(str(cfg)))
    opts = host_options.parse(
        split(["--hosts", "nosuch-host.invalid:1", "--ssh-opts", ssh_opts, "t.py"])
    )
    with pytest.raises(UsageError, match=r"does not resolve \(not in (.*), /etc/hosts") as err:
        ssh_hosts.resolve(opts)
    assert f"not in {cfg}, /etc/hosts" in str(err.value) and "~/.ssh" not in str(err.value)
    plain = host_options.parse(split(["--hosts", "nosuch-host.invalid:1", "t.py"]))
    with pytest.raises(UsageError, match=r"not in ~/.ssh/config, /etc/hosts or DNS"):
        ssh_hosts.resolve(plain)
