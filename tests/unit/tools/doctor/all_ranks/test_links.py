"""tools/doctor/all_ranks/links.py: node leaders, link verdict: sync_s = 2(N-1)/N × 4 × params /
bandwidth."""

from __future__ import annotations

from typing import Any

import pytest

from distrain.tools.doctor.all_ranks.links import leaders, node_name, suggest_hook, verdict


def _entry(rank: int, node: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "hostname": f"host{node}",
        "node": {"node_rank": node, "address": f"10.0.0.{node + 1}"},
    }


def test_leaders_are_each_nodes_lowest_rank() -> None:
    heads = leaders([_entry(3, 1), _entry(2, 1), _entry(1, 0), _entry(0, 0)])
    assert {node: e["rank"] for node, e in heads.items()} == {0: 0, 1: 2}
    assert node_name(heads[1]) == "node 1 (host1, 10.0.0.2)"


def test_one_node_has_no_link_to_judge() -> None:
    check = verdict([], leaders([_entry(0, 0), _entry(1, 0)]), 1000, 0.1)
    assert check.status == "ok" and check.data["nodes"] == 1


def test_fast_link_is_ok_and_sync_time_follows_the_ring_formula() -> None:
    heads = leaders([_entry(0, 0), _entry(1, 1)])
    links = [{"nodes": [0, 1], "rtt_us": 50.0, "bytes_per_s": 1e9}]
    check = verdict(links, heads, params=25_000_000, step_s=0.25)
    # 2 nodes: factor 2(2-1)/2 = 1, so 100 MB of fp32 gradients over 1 GB/s take 0.1 s
    assert links[0]["sync_s"] == pytest.approx(0.1)
    assert check.status == "ok" and check.seen.endswith("(under the 0.25 s step)")


def test_slow_link_warns_and_names_the_hook() -> None:
    heads = leaders([_entry(0, 0), _entry(1, 1), _entry(2, 2), _entry(3, 3)])
    links = [
        {"nodes": [0, 1], "rtt_us": 80.0, "bytes_per_s": 1.25e8},
        {"nodes": [2, 3], "rtt_us": 80.0, "bytes_per_s": 1e10},
    ]
    check = verdict(links, heads, params=10_000_000, step_s=0.5)
    # 4 nodes: factor 2·3/4 = 1.5; 40 MB of fp32 gradients × 1.5 / 125 MB/s = 0.48 s
    assert links[0]["sync_s"] == pytest.approx(0.48)
    assert check.status == "ok"
    check = verdict(links, heads, params=10_000_000, step_s=0.3)
    assert check.status == "warn" and check.data["slow"] == [[0, 1]]
    assert "1.6x the 0.3 s step: this link starves training" in check.seen
    assert check.fix is not None and "comm_hook='bf16'" in check.fix


def test_suggest_hook_picks_powersgd_when_halving_is_not_enough() -> None:
    assert "comm_hook='bf16'" in suggest_hook(sync_s=0.4, step_s=0.25)
    assert "comm_hook='powersgd:rank=4'" in suggest_hook(sync_s=1.0, step_s=0.25)
