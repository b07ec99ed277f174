"""`distrain run --hosts/--hostfile`: host lists, hostfiles, --include/--exclude, the option
scanner, and the command each host is sent (launch/hosts/hostfile.py, host_options.py,
ssh_hosts.py).

No ssh is started here; tests/jobs/test_hosts.py runs the real thing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch.command_line import split
from distrain.launch.hosts import by_hand, options as host_options, ssh as ssh_hosts
from distrain.launch.hosts.hostfile import HostSpec, parse_hostfile_text, parse_hosts, select


def parse_argv(argv: list[str]) -> host_options.HostsOptions:
    """host_options.parse of a command line split by the one splitter, as `distrain run` does."""
    return host_options.parse(split(argv))


def test_host_lists_and_hostfiles() -> None:
    assert parse_hosts("h1:8,h2:4,h3") == [HostSpec("h1", 8), HostSpec("h2", 4), HostSpec("h3")]
    text = "# the cluster\nworker-0 slots=4\n\nworker-1 slots=2 max_slots=8  # mpirun's extra key\n"
    assert parse_hostfile_text(text) == [HostSpec("worker-0", 4), HostSpec("worker-1", 2)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "worker-0 slots=4\nworker-1\n",
            "hostfile:2: 'worker-1' has no slots=N (write 'worker-1 slots=N')",
        ),
        # the --hosts spelling in a hostfile: the fix keeps its count
        ("h1:1\n", "hostfile:1: 'h1:1' has no slots=N (write 'h1 slots=1')"),
        ("[fd00::2]:4\n", "hostfile:1: '[fd00::2]:4' has no slots=N (write 'fd00::2 slots=4')"),
        ("worker-0 slots=4\nworker-0 slots=2\n", "hostfile: host worker-0 is listed twice"),
        ("worker-0 slots=zero\n", "hostfile:1: slots must be a positive integer (got 'zero')"),
        ("# nothing\n", "hostfile: no hosts given"),
    ],
)
def test_bad_hostfiles(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_hostfile_text(text)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [("h1:2,h1:2", "listed twice"), ("h1:0", "positive integer"), ("h1,,h2", "not a host name")],
)
def test_bad_host_lists(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_hosts(text)
    assert message in str(err.value)


def test_include_and_exclude_as_deepspeed() -> None:
    hosts = [HostSpec("w0", 4), HostSpec("w1", 4), HostSpec("w2", 4)]
    assert select(hosts, "w0@w2:0,2", None) == [HostSpec("w0", 4), HostSpec("w2", 4, (0, 2))]
    assert select(hosts, None, "w1@w2:3") == [HostSpec("w0", 4), HostSpec("w2", 4, (0, 1, 2))]
    assert select(hosts, None, "w2:3")[2].nproc() == 3
    for include, exclude, message in [
        ("w9", None, "--include: unknown host w9"),
        ("w0", "w1", "cannot be used together"),
        ("w0:7", None, "host w0 has 4 slot(s); slot 7 does not exist"),
        (None, "w0@w1@w2", "leaves no host"),
    ]:
        with pytest.raises(UsageError) as err:
            select(hosts, include, exclude)
        assert message in str(err.value)


def test_parse_splits_own_node_and_script_options(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb slots=2\n")
    opts = parse_argv(["--hostfile", str(hostfile), "--ssh-opts", "-F cfg -p 2222", "-x", "FOO",
                       "-x", "BAR=1",
                               "--max-restarts", "2", "--nnodes", "1:2", "--quiet-hosts", "--iface",
                       "b=ib0", "train.py", "--n", "5"])  # fmt: skip
    assert [h.name for h in opts.hosts] == ["a", "b"]
    assert opts.ssh_opts == ["-F", "cfg", "-p", "2222"] and opts.env == {"FOO": None, "BAR": "1"}
    assert opts.node_argv == ["--max-restarts", "2"] and opts.script_argv == [
        "train.py",
        "--n",
        "5",
    ]
    assert opts.min_nodes == 1 and opts.quiet_hosts and opts.iface == {"b": "ib0"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--hosts", "a,b", "--node-rank", "1", "t.py"],
            "--node-rank cannot be given with --hosts/--hostfile",
        ),
        (
            ["--hosts", "a,b", "--master-addr", "x", "t.py"],
            "--master-addr cannot be given with --hosts/--hostfile",
        ),
        (
            ["--hosts", "a,b", "--nnodes", "3", "t.py"],
            "--nnodes 3 does not fit 2 host(s): give 2, or MIN:2",
        ),
        (["--hosts", "a,b", "--nnodes", "1:3", "t.py"], "--nnodes 1:3 does not fit 2 host(s)"),
        (["--hosts", "a,b", "--nnodes", "3:2", "t.py"], "--nnodes 3:2 does not fit"),
        (["--hosts", "a,b", "--nnodes", "two", "t.py"], "--nnodes two does not fit 2 host(s)"),
        (["--hosts", "a,b", "--nnodes", "0:2", "t.py"], "--nnodes 0:2 does not fit 2 host(s)"),
        (["--hosts", "a,a", "t.py"], "--hosts a,a: host a is listed twice"),
        (["--hosts", "a,b", "--hostfile", "f", "t.py"], "give the hosts once"),
        (["--hosts", "a,b", "--iface", "c=eth0", "t.py"], "--iface: unknown host c"),
        (["--hosts", "a,b", "--bogus", "t.py"], "unknown option --bogus"),
        (["--hosts", "a,b"], "no training script given"),
        (
            ["--hostfile", "/nonexistent/hosts", "t.py"],
            "--hostfile /nonexistent/hosts: No such file or directory",
        ),
    ],
)
def test_bad_input_is_one_message(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_argv(argv)
    assert str(err.value).startswith(message), str(err.value)


def test_bad_input_through_the_command_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-m", "distrain.cli", "run", "--hosts", "a:1,b:1",
                          "--node-rank", "0", "t.py"],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("distrain run: error: --node-rank cannot be given with --hosts")


def test_each_host_gets_its_rank_slots_and_the_forwarded_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opts = parse_argv(
        [
            "--hosts",
            "a:2,b",
            "--include",
            "a:0,1@b",
            "-x",
            "OMP_NUM_THREADS",
            "--iface",
            "eth1",
            "t.py",
            "-v",
        ]
    )
    env = ssh_hosts.forwarded_env(
        opts,
        {"NCCL_DEBUG": "INFO", "HOME": "/root", "OMP_NUM_THREADS": "3", "DISTRAIN_DEVICE": "cpu"},
    )
    assert env == {"DISTRAIN_DEVICE": "cpu", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "3"}
    a, b = ssh_hosts.node_argv(opts, 0, "id1"), ssh_hosts.node_argv(opts, 1, "id1")
    assert a[:8] == [
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "@MASTER_ADDR@",
        "--master-port",
        "@MASTER_PORT@",
    ]
    assert a[8:] == ["-n", "2", "--gpus", "0,1", "--iface", "eth1", "t.py", "-v"]
    assert b[8:] == [
        "-n",
        "auto",
        "--iface",
        "eth1",
        "t.py",
        "-v",
    ]  # no slots: its GPUs, else its cores
    elastic = ssh_hosts.node_argv(
        parse_argv(["--hosts", "a,b", "--nnodes", "1:2", "-n", "1", "t.py"]), 1, "id1"
    )
    assert elastic == ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                       "@MASTER_ADDR@:@MASTER_PORT@",
                       "--rdzv-id", "id1", "--max-restarts", "3", "-n", "1", "t.py"]  # fmt: skip
    given = ssh_hosts.node_argv(
        parse_argv(["--hosts", "a,b", "--nnodes", "1:2", "--max_restarts=1", "-n", "1", "t.py"]),
        1,
        "id1",
    )
    # the user's budget, in either spelling, and no second one
    assert "--max-restarts" not in given and given[given.index("--max_restarts") + 1] == "1"
    remote = ssh_hosts.remote_command(opts, 1, ["10.0.0.1", "10.0.0.2"], env, "id1")
    words = shlex.split(remote)
    assert (
        words[:4] == ["cd", os.getcwd(), "&&", "exec"]
        and words[4] == "env"
        and "NCCL_DEBUG=INFO" in words
    )
    assert sys.executable in words and words[
        words.index(sys.executable) + 1 : words.index(sys.executable) + 3
    ] == ["-m", "distrain.launch.hosts.node"]
    words = shlex.split(ssh_hosts.remote_command(opts, 0, ["10.0.0.1", "10.0.0.2"], env, "id1"))
    first = json.loads(words[words.index("distrain.launch.hosts.node") + 1])
    assert first == {
        "script": "t.py",
        "first": True,
        "port": 0,
        "ports": 1,
        "iface": "eth1",
        "route_to": "10.0.0.2",
    }


def test_replicas_over_hosts_split_each_hosts_slots_among_its_groups() -> None:
    opts = parse_argv(["--hosts", "a:4,b:8", "--include", "a@b:4,5,6,7", "--replicas", "4", "t.py"])
    assert (opts.replicas, opts.per_group) == (4, 2)  # 2 groups of 2 processes on each host
    b = ssh_hosts.node_argv(opts, 1, "id1")
    assert b == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "@MASTER_ADDR@",
                 "--master-port", "@MASTER_PORT@",
                 "--replicas", "4", "-n", "2", "t.py"]  # fmt: skip
    # the groups take their GPUs from CUDA_VISIBLE_DEVICES (--replicas refuses --gpus)
    words = shlex.split(ssh_hosts.remote_command(opts, 1, ["10.0.0.1", "10.0.0.2"], {}, "id1"))
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in words
    words = shlex.split(ssh_hosts.remote_command(opts, 0, ["10.0.0.1", "10.0.0.2"], {}, "id1"))
    assert (
        json.loads(words[words.index("distrain.launch.hosts.node") + 1])["ports"] == 2
    )  # + the roll call
    # the sessions start before the names are resolved: the first host reads its route later
    later = ssh_hosts.probe_spec(opts, 0, None)
    assert later["route_later"] and "route_to" not in later and later["ports"] == 2
    assert json.loads(ssh_hosts.route_line(["10.0.0.1", "10.0.0.2"])) == {"route_to": "10.0.0.2"}
    per_group = parse_argv(["--hosts", "a,b", "--replicas", "2", "-n", "3", "t.py"])
    assert ssh_hosts.node_argv(per_group, 0, "id1")[8:] == ["--replicas", "2", "-n", "3", "t.py"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "3"],
         "--replicas 3 does not divide over 2 hosts: "
         "each host runs the same number of whole groups"),
        (["--replicas", "2", "--nnodes", "1:2"],
         "--replicas needs a fixed --nnodes 2, not a range"),
        (["--replicas", "0"], "--replicas expects a number of replica groups (got '0')"),
    ],
)  # fmt: skip
def test_replicas_that_cannot_be_placed_on_the_hosts_are_one_line(
    argv: list[str], message: str
) -> None:
    with pytest.raises(UsageError) as err:
        parse_argv(["--hosts", "a:2,b:2", *argv, "t.py"])
    assert str(err.value).startswith(message), str(err.value)
    with pytest.raises(UsageError) as err:  # groups of one size: the hosts' slots must agree
        parse_argv(["--hosts", "a:2,b:1", "--replicas", "2", "t.py"])
    assert "every host needs the same slots" in str(err.value)


def test_dry_run_and_container_lines() -> None:
    opts = parse_argv(
        ["--hosts", "a:1,b:1", "--container", "img:1", "--ssh-opts", "-p 2222", "--dry-run", "t.py"]
    )
    assert opts.dry_run and "--dry-run" not in opts.node_argv
    lines = ssh_hosts.dry_run_lines(opts, ["10.0.0.1", "10.0.0.2"])
    assert lines.pop(0).startswith("# what distrain run --hosts runs over ssh")
    assert lines[0].startswith(
        "# @MASTER_ADDR@ and @MASTER_PORT@ are filled in when the job starts"
    )
    assert lines[1].startswith("[a] ssh -o BatchMode=yes -p 2222 -o ConnectTimeout=10") and lines[
        2
    ].startswith("[b] ssh ")
    remote = shlex.split(shlex.split(lines[2][4:])[-1])
    cwd = os.getcwd()
    docker = ["docker", "run", "-i", "--rm", "--name"]
    assert remote[4:9] == docker and remote[10:18] == [
        "--gpus",
        "all",
        "--ipc=host",
        "--net=host",
        "-v",
        f"{cwd}:{cwd}",
        "-w",
        cwd,
    ]
    assert "img:1" in remote and remote[remote.index("img:1") + 1 : remote.index("img:1") + 4] == [
        "python",
        "-m",
        "distrain.launch.hosts.node",
    ]


@contextlib.contextmanager
def _listening_above() -> Iterator[tuple[int, int]]:
    """A port this test holds (free for the probe: both bind with SO_REUSEADDR) and a listener
    on the port above it; a port another process holds could fail the probe's own check."""
    from distrain.net import reserve_port

    for _ in range(20):
        with contextlib.closing(reserve_port()) as below:
            port = int(below.getsockname()[1])
            with socket.socket() as taken:
                try:
                    taken.bind(("0.0.0.0", port + 1))
                except OSError:
                    continue
                taken.listen()
                yield port, port + 1
                return
    raise AssertionError("no two ports in a row to hold")


def test_the_hosts_check_reads_versions_script_and_port_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distrain.launch.hosts import node as host_node

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    seen = host_node.probe(
        {"script": "train.py", "first": True, "port": 0, "iface": None, "route_to": "127.0.0.1"}
    )
    assert seen["script_ok"] and seen["torch"] == torch_version() and seen["address"] == "127.0.0.1"
    assert isinstance(seen["port"], int) and not seen["port_error"]
    # --replicas: the roll call listens one port above the lighthouse; both must be free
    with _listening_above() as (below, busy):
        assert host_node.probe({"first": True, "port": below, "ports": 2})["port_error"] == (
            f"port {busy} (above master port {below}) is already in use there"
        )
        port = host_node.probe({"first": True, "port": 0, "ports": 2})["port"]
        assert host_node._port(port, 2) == (port, None)
    assert not host_node.probe({"script": "missing.py"})["script_ok"]
    code = (
        "import sys; from distrain.launch.hosts import node as host_node; "
        "host_node.fingerprint(); print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
        ).stdout.strip()
        == "False"
    )


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def test_by_hand_lines_in_the_container() -> None:
    opts = parse_argv(["--hosts", "a:1,b:2", "--container", "img:1", "--dry-run", "t.py", "--x"])
    first, second = by_hand.node_commands(opts, ["10.0.0.1", "10.0.0.2"])
    cwd = os.getcwd()
    assert second[:11] == ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "--net=host",
                           "-v", f"{cwd}:{cwd}", "-w", cwd]  # fmt: skip
    tail = second[second.index("img:1") + 1 :]
    assert tail == ["distrain", "run", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                    "10.0.0.1", "--master-port", "29500", "-n", "2", "t.py", "--x"]  # fmt: skip
    assert first[first.index("--node-rank") + 1] == "0"
