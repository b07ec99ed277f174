"""`distrain bench scaling --nodes 1,2 --hosts …`: K-node rows go through `distrain run --hosts`.

The real thing (two namespace hosts with sshd) is tests/jobs/test_bench_nodes.py.
"""

from __future__ import annotations

import argparse

import pytest

from distrain.errors import UsageError
from distrain.tools.bench.study import nodes
from distrain.tools.bench.study.runner import RunSpec


def _args(**over: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    nodes.add_arguments(p)
    args = p.parse_args([])
    for key, value in over.items():
        setattr(args, key, value)
    return args


def test_a_k_node_run_is_the_hosts_fan_out_of_the_first_k_hosts() -> None:
    one = RunSpec(
        "n2-bn",
        2,
        False,
        ["py", "-m", "distrain.cli", "run", "--nproc", "2", "s.py", "--epochs", "1"],
    )
    args = _args(nodes="1,2,3", hosts="a,b:8,c", ssh_opts="-F cfg")
    two, three = nodes.expand([one], args)[1:]
    assert (two.name, two.nproc, three.nproc) == ("2nodes-n2-bn", 4, 6)
    # the run's own -n sets every host's processes (slots in --hosts are ignored)
    assert two.command == ["py", "-m", "distrain.cli", "run", "--hosts", "a,b", "--ssh-opts",
                           "-F cfg",
                           "-x", "OMP_NUM_THREADS", "--nproc", "2", "s.py", "--epochs",
                           "1"]  # fmt: skip
    assert three.command[4:6] == ["--hosts", "a,b,c"]


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"hosts": "a"}, "--nodes 1,2 needs 2 hosts, --hosts names 1"),
        ({"hosts": "a,b", "master_addr": "10.0.0.1"}, "--hosts starts the nodes itself"),
        ({"hosts": "a,a"}, "--hosts a,a: host a is listed twice"),
        ({}, "--nodes above 1 needs --hosts h0,h1 (ssh), or --node-exec"),
    ],
)
def test_bad_multi_node_options_are_one_message(over: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as err:
        nodes.node_counts(_args(nodes="1,2", **over))
    assert str(err.value).startswith(message), str(err.value)
