"""`distrain bench scaling --nodes 1,2`: the same study on 1 node and across 2 namespace nodes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import SCRIPTS, python, run
from helpers.netns_hosts import make_hosts
from helpers.ssh_cluster import assert_clean, ssh_cluster

BENCH = [python(), "-m", "distrain.cli", "bench", "scaling"]


def _two_node_command(results: dict) -> list[str]:
    """The 1-vs-2-nodes chart's two rows both ran; the command of the two-node one."""
    configs = {c["name"]: c for c in results["configs"]}
    assert set(configs) == {"n1-bn", "2nodes-n1-bn"}, configs
    two = configs["2nodes-n1-bn"]
    assert two["status"] == "ok" and two["nproc"] == 2 and two["samples_per_s"] > 0, two
    return next(r["command"] for r in results["rounds"] if r["name"] == "2nodes-n1-bn")


@pytest.mark.netns
@pytest.mark.timeout(500)
@pytest.mark.slow
def test_one_node_against_two_over_a_slow_link(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with make_hosts(2, rate="100mbit") as hosts:
        prefix = hosts.names[0][:-1]  # names are <tag>n0, <tag>n1
        args = [
            "--nproc",
            "1",
            "--no-all-cores",
            "--nodes",
            "1,2",
            "--node-exec",
            f"ip netns exec {prefix}{{node}}",
            "--master-addr",
            hosts.addrs[0],
            "--link-label",
            "100 Mbit/s",
            "--epochs",
            "1",
            "--out",
            str(out),
            str(SCRIPTS / "bench_steps.py"),
        ]
        res = run(BENCH + args, timeout=480)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    configs = {c["name"]: c for c in results["configs"]}
    assert set(configs) == {"n1-bn", "2nodes-n1-bn"}, configs
    two = configs["2nodes-n1-bn"]
    assert two["status"] == "ok" and two["nproc"] == 2 and two["samples_per_s"] > 0, two
    # a static --nnodes 2 job only finishes when both namespaces' launchers joined it
    command = _two_node_command(results)
    assert command[2:6] == [
        "distrain.tools.bench.study.nodes",
        "launch",
        "--nnodes",
        "2",
    ] and f"{prefix}{{node}}" in " ".join(command), command
    assert (
        results["links"] == "100 Mbit/s"
        and "linked by 100 Mbit/s" in (out / "report.md").read_text()
    )
    # one table from several studies: 1 node against 2 nodes
    table = run(
        [python(), "-m", "distrain.tools.bench.study.nodes", "combine", str(out)],
        timeout=60,
        check=True,
    ).stdout
    row = next(ln for ln in table.splitlines() if "2nodes-n1-bn" in ln)
    assert row.startswith("| 100 Mbit/s | 2nodes-n1-bn | 2 | 2 |") and "x |" in row, table


@pytest.mark.netns
@pytest.mark.timeout(500)
@pytest.mark.slow
def test_one_node_against_two_ssh_hosts(tmp_path: Path) -> None:
    """--hosts: the 2-node run is the ssh fan-out of `distrain run --hosts` (the bench itself runs
    on the launching machine, beside the two namespace hosts with sshd)."""
    out = tmp_path / "report"
    with ssh_cluster(2, tmp_path, rate="100mbit") as c:
        args = ["--nproc", "1", "--no-all-cores", "--nodes", "1,2", "--hosts", "h0,h1",
                "--ssh-opts", f"-F {c.config}",
                "--link-label", "100 Mbit/s", "--epochs", "1", "--out", str(out),
                str(SCRIPTS / "bench_steps.py")]  # fmt: skip
        res = subprocess.run(
            c.launch_cmd(BENCH + args), capture_output=True, text=True, timeout=470
        )
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert_clean(c)
    results = json.loads((out / "results.json").read_text())
    command = _two_node_command(results)
    assert command[2:8] == [
        "distrain.cli",
        "run",
        "--hosts",
        "h0,h1",
        "--ssh-opts",
        f"-F {c.config}",
    ], command
    # both hosts' nodes took part: the fan-out's own lines in the run's log
    log = (out / "runs" / "2nodes-n1-bn" / "round1" / "log.txt").read_text()
    assert (
        "distrain run: 2 hosts (h0, h1), static" in log and "job finished on 2 of 2 host(s)" in log
    ), log[-2000:]


def test_multi_node_options_are_checked() -> None:
    res = run(BENCH + ["--nodes", "1,2", "--master-addr", "10.0.0.1"], timeout=60)
    assert (
        res.returncode == 2
        and "--hosts h0,h1 (ssh), or --node-exec" in res.stderr
        and len(res.stderr.strip().splitlines()) == 1
    ), res.stderr
    res = run(BENCH + ["--nodes", "0"], timeout=60)
    assert res.returncode == 2 and "--nodes" in res.stderr, res.stderr
