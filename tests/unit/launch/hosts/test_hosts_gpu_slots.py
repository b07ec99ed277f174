"""`distrain run --hosts a,b --replicas R`: hosts given without slots use the GPUs their checks
count.  Each host's check reply comes from a real process printing it (as host_node does over
ssh); the launcher's own decision (hosts_run._check) reads it, and the held nodes get the group
size with the go (host_go.fill)."""

from __future__ import annotations

import json
import shlex
import threading

import pytest

from distrain.errors import UsageError
from distrain.launch.command_line import split
from distrain.launch.hosts import (
    go as host_go,
    options as host_options,
    run as hosts_run,
    ssh as ssh_hosts,
)
from distrain.launch.hosts.node import PROBE_MARK, fingerprint


def _sessions(gpus: dict[str, int]) -> list[hosts_run.Session]:
    out = []
    for name, count in gpus.items():
        reply = {**fingerprint(), "gpus": count, "cwd": "/w", "script_ok": True,
                 "address": "10.0.0.1", "address_error": None, "port": 29500,
                 "port_error": None}  # fmt: skip
        line = shlex.quote(PROBE_MARK + json.dumps(reply))
        out.append(hosts_run.Session(name, ["sh", "-c", f"echo {line}; cat >/dev/null"], False))
    return out


def _decide(hosts: str, gpus: dict[str, int], groups: int = 4) -> host_options.HostsOptions:
    opts = host_options.parse(split(["--hosts", hosts, "--replicas", str(groups), "t.py"]))
    sessions = _sessions(gpus)
    try:
        assert hosts_run._check(sessions, opts, threading.Event()) == ("10.0.0.1", 29500)
    finally:
        hosts_run._stop(sessions)
    return opts


def test_hosts_without_slots_split_their_gpus_among_their_groups() -> None:
    opts = host_options.parse(split(["--hosts", "a,b", "--replicas", "4", "t.py"]))
    assert opts.replicas == 4 and opts.per_group is None  # not known before the hosts answer
    argv = ssh_hosts.node_argv(opts, 1, "job")
    assert argv[argv.index("--replicas") :][:4] == ["--replicas", "4", "-n", host_go.NPROC_TOKEN]
    shown = ssh_hosts.dry_run_lines(opts, ["10.0.0.1", "10.0.0.2"])
    assert (
        "# @NPROC@: the processes per replica group, from the GPUs the hosts' checks count" in shown
    )
    opts = _decide("a,b", {"a": 4, "b": 4})
    assert opts.per_group == 2  # 4 GPUs, 2 groups on each host
    go = {"master_addr": "10.0.0.1", "master_port": 29500, "nproc": opts.per_group}
    assert host_go.fill(split(argv), go).value("nproc") == "2"
    assert _decide("a:2,b", {"a": 8, "b": 2}).per_group == 1  # given slots win over GPUs


@pytest.mark.parametrize(
    ("hosts", "gpus", "shown"),
    [("a,b", {"a": 4, "b": 2}, "(a:4, b:2)"), ("a,b", {"a": 2, "b": 0}, "(a:2, b:?)")],
)
def test_hosts_whose_gpus_do_not_split_evenly_are_one_line(
    hosts: str, gpus: dict[str, int], shown: str
) -> None:
    with pytest.raises(UsageError) as err:
        _decide(hosts, gpus)
    assert str(err.value).startswith(
        f"--replicas 4 on 2 hosts {shown}: every host needs the same slots"
    ), str(err.value)
