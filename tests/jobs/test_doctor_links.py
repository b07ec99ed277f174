"""The all-ranks doctor's link check across two namespace "nodes": a 100 Mbit/s link is named.

An unlimited link is not named.

Each node is a network namespace; its veth is rate-limited with ``tc ... tbf`` on both ends
(tests/helpers/netns_hosts.py).  The doctor runs as a real 2-node ``distrain run`` job, one process
per node, and judges the link for an 11 M-parameter model at 1 s of computation per step: 44 MB of
fp32 gradients take ~3.7 s over 100 Mbit/s (a warning), ~0.3 s or less over the unlimited veth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import python
from helpers.netns_hosts import Hosts, make_hosts

pytestmark = [pytest.mark.netns, pytest.mark.timeout(400)]


def _doctor(hosts: Hosts, tmp_path: Path, tag: str) -> dict:
    """Run the all-ranks doctor as a 2-node job; rank 0's JSON document."""
    common = [
        "--nnodes",
        "2",
        "--master-addr",
        hosts.addrs[0],
        "--master-port",
        "29500",
        "-n",
        "1",
        "-m",
        "distrain.tools.doctor",
        "--json",
        "--timeout",
        "60",
        "--bandwidth-bytes",
        "1M",
        "--model-params",
        "11M",
        "--step-time",
        "1",
    ]
    outs = [tmp_path / f"{tag}{i}.out" for i in range(2)]
    errs = [tmp_path / f"{tag}{i}.err" for i in range(2)]
    procs = [
        hosts.start(
            i,
            [python(), "-m", "distrain.cli", "run", "--node-rank", str(i), *common],
            outs[i],
            err_log=errs[i],
        )
        for i in range(2)
    ]
    codes = hosts.wait(procs, 240, errs + outs)
    text = outs[0].read_text()
    try:
        doc = json.loads(text[text.index("{") :])
    except ValueError:
        pytest.fail(
            f"exit codes {codes}; node 0 printed no "
            f"JSON:\n{text[-2000:]}\n{errs[0].read_text()[-3000:]}"
        )
    return {c["id"]: c for c in doc["checks"]}


@pytest.mark.slow
def test_slow_link_is_named_and_fast_one_is_not(tmp_path: Path) -> None:
    with make_hosts(2, rate="100mbit") as hosts:
        links = _doctor(hosts, tmp_path, "slow")["ranks.links"]
        assert links["status"] == "warn", links
        (link,) = links["data"]["links"]
        assert link["nodes"] == [0, 1] and link["bytes_per_s"] < 13e6, (
            link
        )  # 100 Mbit/s = 12.5 MB/s
        # the warning names the link by both nodes' addresses and suggests a comm hook
        assert (
            "node 0 (" in links["seen"]
            and f"{hosts.addrs[0]})" in links["seen"]
            and f"{hosts.addrs[1]})" in links["seen"]
        )
        assert "starves training" in links["seen"] and "comm_hook=" in links["fix"], links

        hosts.shape(None)
        links = _doctor(hosts, tmp_path, "fast")["ranks.links"]
        assert links["status"] == "ok" and links["fix"] is None, links
        (link,) = links["data"]["links"]
        assert link["bytes_per_s"] > 50e6 and link["sync_s"] < 1, link


def test_verdict_threshold_and_suggested_hook() -> None:
    from distrain.tools.doctor.all_ranks.links import verdict

    nodes = {
        i: {
            "rank": i,
            "hostname": "h",
            "node": {"node_rank": i, "local_rank": 0, "address": f"10.0.0.{i + 1}"},
        }
        for i in range(2)
    }

    def link(gbit: float) -> list[dict]:
        return [
            {
                "nodes": [0, 1],
                "ranks": [0, 1],
                "rtt_us": 100.0,
                "bytes": 1,
                "seconds": 1.0,
                "bytes_per_s": gbit * 1e9 / 8,
            }
        ]

    # 25 M parameters = 100 MB of fp32 gradients; a 0.25 s step needs 3.2 Gbit/s between 2 nodes
    assert verdict(link(4.0), nodes, 25_000_000, 0.25).status == "ok"
    slow = verdict(link(2.0), nodes, 25_000_000, 0.25)  # 0.4 s: half the bytes fit → bf16
    assert (
        slow.status == "warn"
        and "node 0 (h, 10.0.0.1) <-> node 1 (h, 10.0.0.2)" in slow.seen
        and "comm_hook='bf16'" in slow.fix
    )
    very_slow = verdict(link(0.1), nodes, 25_000_000, 0.25)  # 8 s: only PowerSGD helps
    assert very_slow.status == "warn" and "powersgd" in very_slow.fix
    assert verdict([], {0: nodes[0]}, 25_000_000, 0.25).status == "ok"  # one node: nothing to judge
