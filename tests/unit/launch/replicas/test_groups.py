"""launch/replicas/groups.py, lighthouse.py: `--replicas` refusals, command and event lines."""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import pytest

from distrain.coordination.replica_marks import ft_started, open_step, write_step
from distrain.errors import UsageError
from distrain.events import emit
from distrain.launch.command_line import split
from distrain.launch.replicas import lighthouse
from distrain.launch.replicas.events import AgentLossReporter, ReplicaJob
from distrain.launch.replicas.groups import check_replicas, group_argv
from distrain.launch.replicas.nodes import Placement


def _args(**over: object) -> argparse.Namespace:
    values = {
        "replicas": "2",
        "launcher": "torchrun",
        "nnodes": "1:1",
        "gpus": None,
        "nproc_per_node": "1",
        "cpu": False,
        "node_rank": "0",
        "master_addr": "127.0.0.1",
        "master_port": None,
    }
    values.update(over)
    return argparse.Namespace(**values)


def test_accepts_groups_on_one_node() -> None:
    assert check_replicas(_args(), gpus_visible=0) == Placement(2, 1)
    assert check_replicas(_args(replicas="3", nproc_per_node="2"), gpus_visible=0).local == [
        0,
        1,
        2,
    ]


@pytest.mark.parametrize(
    ("over", "gpus", "message"),
    [
        ({"replicas": "0"}, 0, "--replicas must be at least 1"),
        ({"replicas": "two"}, 0, "expects a number of replica groups"),
        ({"launcher": "mpirun"}, 0, "cannot be combined with --launcher mpirun"),
        (
            {"nnodes": "3", "master_addr": "10.0.0.1"},
            0,
            "--replicas 2 does not divide over --nnodes 3",
        ),
        ({"nnodes": "1:2"}, 0, "needs a fixed number of nodes"),
        ({"nnodes": "2", "master_addr": "127.0.0.1"}, 0, "across nodes needs --master-addr"),
        (
            {"nnodes": "2", "node_rank": "2", "master_addr": "10.0.0.1"},
            0,
            "--node-rank must be 0…1",
        ),
        ({"gpus": "0,1"}, 2, "CUDA_VISIBLE_DEVICES instead of --gpus"),
        ({"replicas": "2", "nproc_per_node": "2"}, 2, "needs 4 GPUs, 2 visible"),
    ],
)
def test_refuses_what_cannot_run(over: dict[str, object], gpus: int, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_replicas(_args(**over), gpus_visible=gpus)


def test_cpu_rehearsal_does_not_count_gpus() -> None:
    assert check_replicas(_args(replicas="4", cpu=True), gpus_visible=1).groups == 4


def test_missing_torchft_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lighthouse.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError, match=r"pip install 'distrain\[ft\]'"):
        lighthouse.lighthouse_program()


def test_group_argv_drops_replicas_and_gives_a_restart_budget() -> None:
    argv = group_argv(
        split(["--replicas", "2", "-n", "1", "--run-dir=runs", "train.py", "--lr", "1"]), 1
    )
    assert argv == ["-n", "1", "--run-dir", "runs/group1", "--max-restarts", "3", "train.py",
                    "--lr", "1"]  # fmt: skip
    assert group_argv(split(["--replicas=2", "--max-restarts", "5", "--", "-m", "pkg"]), 0) == [
        "--max-restarts",
        "5",
        "--",
        "-m",
        "pkg",
    ]
    # any spelling of --max-restarts is the user's budget
    assert group_argv(split(["--replicas", "2", "--max_restarts=0", "t.py"]), 0) == [
        "--max_restarts=0",
        "t.py",
    ]


def test_group_argv_a_switch_before_replicas_does_not_swallow_it() -> None:
    # `run --cpu --replicas 2`: read as --cpu's value, --replicas stayed in every group's
    # command line and each group started a replicas job of its own, without end
    argv = group_argv(split(["--cpu", "--replicas", "2", "--dry-run", "-n", "1", "t.py"]), 0)
    assert argv == ["--cpu", "--dry-run", "-n", "1", "--max-restarts", "3", "t.py"]


def test_replicas_inside_a_group_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_REPLICA_GROUP", "1")
    with pytest.raises(UsageError, match="inside replica group 1"):
        check_replicas(argparse.Namespace(replicas="2", launcher="torchrun"), 0)


def test_agent_record_becomes_a_lost_event(tmp_path: Path) -> None:
    record = logging.LogRecord(
        "x",
        logging.ERROR,
        "f",
        1,
        "failed (exitcode: %s) local_rank: %s (pid: %s) of fn: %s",
        (-9, 0, 4242, "f"),
        None,
    )
    assert AgentLossReporter(str(tmp_path), 1).filter(record)
    event = json.loads((tmp_path / "events.jsonl").read_text())
    assert event.pop("time") > 0 and event.pop("node", None) is None
    assert event == {
        "kind": "replica", "event": "lost", "group": 1, "rank": 0, "pid": 4242, "exitcode": -9
    }  # fmt: skip


def test_events_become_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = ReplicaJob(2, str(tmp_path))
    fd = open_step(str(tmp_path), 1)
    write_step(fd, 246)
    os.close(fd)
    emit("replica", str(tmp_path), event="lost", group=1, rank=0, pid=4242, exitcode=-9)
    emit(
        "replica", str(tmp_path), event="joined", group=1, rank=0, step=250, source=0, seconds=0.91
    )
    job.read_events()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "distrain run: replica group 1 lost at step 246 (rank 0, pid 4242, SIGKILL); "
        "1/2 groups continue",
        "distrain run: replica group 1 healed from group 0 at step 250 in 0.9 s",
    ]
    assert job.lost == set()


def test_a_group_that_ended_holds_up_no_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ReplicaJob(2, str(tmp_path))
    assert not ft_started(str(tmp_path), 1)
    job.on_exit(1, 3)  # failed for good before its first quorum: group 0 must not wait for it
    assert ft_started(str(tmp_path), 1)
    assert "replica group 1 failed (exit code 3); 1/2 groups continue" in capsys.readouterr().err


@pytest.mark.parametrize(("omp", "expected"), [(None, "2"), ("1", "2"), ("3", None)])
def test_group_threads_share_the_node_among_every_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, omp: str | None, expected: str | None
) -> None:
    # 2 groups × 2 processes on 8 cores: 2 threads each. OMP_NUM_THREADS=1 is "not chosen" for
    # distrain (torchrun sets it); each group counted only its own 2 processes and its workers
    # ran 4 threads each, 16 on 8 cores
    from types import SimpleNamespace

    from distrain.launch.replicas import groups as replicas

    monkeypatch.setattr(replicas, "usable_cores", lambda: 8)
    monkeypatch.delenv("DISTRAIN_NUM_THREADS", raising=False)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    house = SimpleNamespace(address="http://127.0.0.1:1")
    env = replicas._group_env(ReplicaJob(2, str(tmp_path)), house.address, 1, Placement(2, 2), [])
    assert env.get("DISTRAIN_NUM_THREADS") == expected
    assert env.get("OMP_NUM_THREADS") == (expected or omp)


def test_groups_are_placed_whole_on_nodes() -> None:
    # 4 groups of 2 on 2 nodes: node 1 runs groups 2 and 3; the lighthouse on the master's port
    placement = check_replicas(
        _args(
            replicas="4",
            nproc_per_node="2",
            nnodes="2",
            node_rank="1",
            master_addr="10.0.0.1",
            master_port="29600",
        ),
        0,
    )
    assert placement.local == [2, 3] and placement.port == 29600 and placement.multi_node
    # the GPUs asked of one node are its own groups' only
    with pytest.raises(
        UsageError, match="needs 4 GPUs on this node \\(2 of 4 groups\\), 2 visible"
    ):
        check_replicas(
            _args(replicas="4", nproc_per_node="2", nnodes="2", master_addr="10.0.0.1"), 2
        )


def test_group_argv_drops_the_multi_node_options() -> None:
    # each group is a one-node job: the node options are the replicas launcher's, not the group's
    argv = group_argv(
        split(["--replicas", "2", "--nnodes", "2", "--node-rank=1", "--master-addr", "10.0.0.1",
               "--master_port", "29500", "--iface", "eth0", "-n", "1", "t.py"]), 1,
    )  # fmt: skip
    assert argv == ["-n", "1", "--max-restarts", "3", "t.py"]


def test_group_env_across_nodes_names_this_nodes_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distrain.launch.replicas import groups as replicas

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    placement = Placement(4, 1, nodes=2, node=1, master_addr="10.0.0.1")
    env = replicas._group_env(
        ReplicaJob(4, str(tmp_path), local=[2, 3]),
        "http://10.0.0.1:29500",
        3,
        placement,
        ["0", "1"],
        "eth0",
        "10.0.0.2",
    )
    assert env["DISTRAIN_FT_HOST"] == "10.0.0.2" and env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["TORCHFT_LIGHTHOUSE"] == "http://10.0.0.1:29500"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # group 3 is this node's second group


def test_the_roll_call_ends_the_groups_of_a_stopped_or_silent_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that stops says its groups ended (leave); one that stops beating has them taken as
    ended (mark_silent): either way the other nodes' groups no longer wait for them at their end."""
    from distrain.coordination.replica_marks import ft_ended
    from distrain.launch.replicas import nodes as replica_nodes
    from distrain.net import reserve_port

    # the roll call listens on the master port + 1: that port is held for it (a free port's
    # neighbour may be any connection's source port on a busy machine)
    held = reserve_port("127.0.0.1")
    port = int(held.getsockname()[1]) - 1
    places = [replica_nodes.Placement(4, 1, 2, n, "127.0.0.1", port) for n in (0, 1)]
    node0 = replica_nodes.RollCall(places[0])  # node 0 first: it hosts the store
    node1 = replica_nodes.RollCall(places[1])
    here, there = tmp_path / "node0", tmp_path / "node1"
    here.mkdir()
    there.mkdir()
    node1.leave(str(there), [2, 3])  # stopped (its ssh session lost): groups 2, 3 end for good
    node0.share_ends(str(here), [0, 1])
    assert all(ft_ended(str(here), g) for g in (2, 3))
    assert bytes(node0.store.get("node1")).decode() == "done"
    # a node that beat and then fell silent (a lost machine): its groups are taken as ended
    monkeypatch.setattr(replica_nodes, "SILENT_S", 0.5)
    node1.store.set("node1", "running 1")
    other = tmp_path / "other"
    other.mkdir()
    node0.mark_silent(str(other))
    assert not ft_ended(str(other), 2)  # heard just now
    time.sleep(replica_nodes.BEAT_S + 0.6)
    node0.mark_silent(str(other))
    assert all(ft_ended(str(other), g) for g in (2, 3))
    assert not ft_ended(str(other), 0)  # node 0's own groups are its own
    held.close()


def test_run_dir_lines_are_what_distrain_top_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from distrain.tools.top.groups import read_events

    job = ReplicaJob(2, str(tmp_path / "ft"), run_dir=str(tmp_path / "run"))
    job.say("replica group 1 healed", "healed", group=1, source=0, step=4)
    job.say("no event: stderr only")
    with open(tmp_path / "run" / "replicas.jsonl", "a") as f:
        f.write('{"kind": "replica", "event": "lo')  # the launcher still writing: left out
    assert [(e["event"], e["group"], e["source"]) for e in read_events(tmp_path / "run")] == [
        ("healed", 1, 0)
    ]
    assert capsys.readouterr().err.count("distrain run: ") == 2
