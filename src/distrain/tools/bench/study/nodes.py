"""Multi-node runs for `distrain bench scaling`: the same study on 1 node and on K nodes.

    distrain bench scaling --nproc 1 --nodes 1,2 --hosts node0,node1 --link-label '10 Gbit/s'

With ``--hosts`` a K-node run is ``distrain run --hosts node0,…,node{K-1} -x OMP_NUM_THREADS
-n NPROC script ...``: the same ssh fan-out as any job (launch/hosts/run.py) checks the first K
hosts, starts every node, picks node 0's address and a free master port, and stops them all
when one fails.  The bench reads the ranks' metrics from its run directory, so that directory
(``--out``) must be on a filesystem every host shares.

Without ssh (``ip netns exec``, ``srun``), ``--node-exec`` with ``--master-addr``: a K-node run's
command becomes ``python -m distrain.tools.bench.study.nodes launch ...``: this small
wrapper starts one ``distrain run --nnodes K --node-rank i --master-addr A --master-port P
-n NPROC script ...`` per node, each prefixed by ``--node-exec`` with ``{node}`` replaced by i
(``ssh node{node}``, ``ip netns exec ns{node}``, ``srun -w node{node} -N1 -n1``), waits for all of
them and stops the others as soon as one fails.  The bench's own variables (``DISTRAIN_*``,
``OMP_NUM_THREADS``, ``PYTHONPATH``) are passed on the command line through ``env`` so that they
reach nodes a prefix like ssh would not forward them to.  Everything else (timing, memory, the
report) is the scaling bench's: a K-node run is one more row, named ``Knodes-...``, whose process
count is K × NPROC.

``python -m distrain.tools.bench.study.nodes combine DIR...`` prints one Markdown table from several
studies (one per link speed): 1 node against K nodes at each speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from distrain.errors import UsageError
from distrain.launch.command_line import split
from distrain.launch.hosts.hostfile import parse_hosts
from distrain.tools.bench.study.runner import RunSpec

#: variables of the bench's environment that every node's launcher must see
FORWARD_PREFIXES = ("DISTRAIN_",)
FORWARD_NAMES = ("OMP_NUM_THREADS", "PYTHONPATH")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The scaling bench's multi-node options."""
    p.add_argument(
        "--nodes",
        default="1",
        help="comma-separated node counts (default 1); K > 1 needs --node-exec and --master-addr",
    )
    p.add_argument(
        "--node-exec",
        help="command prefix that runs a command on node {node} (e.g. 'ssh node{node}', 'ip "
        "netns exec ns{node}')",
    )
    p.add_argument(
        "--hosts",
        help="ssh hosts for the K-node runs (as distrain run --hosts): the first K run each; "
        "node 0's address and port are found as for any --hosts job",
    )
    p.add_argument("--ssh-opts", help="options for ssh with --hosts (e.g. '-F cfg -i key')")
    p.add_argument("--master-addr", help="address of node 0 as the other nodes reach it")
    p.add_argument(
        "--master-port",
        type=int,
        default=29500,
        help="first master port; each multi-node run uses the next one (default 29500)",
    )
    p.add_argument(
        "--link-label",
        help="what the links between nodes are (e.g. '1 Gbit/s'), shown in the report",
    )


def node_counts(args: argparse.Namespace) -> list[int]:
    """The --nodes values, checked together with the options they need; UsageError otherwise."""
    counts = []
    for tok in str(args.nodes).split(","):
        if not tok.strip().isdigit() or int(tok) < 1:
            raise UsageError(
                f"--nodes expects positive integers like 1,2 (got {tok.strip() or args.nodes!r})"
            )
        counts.append(int(tok))
    counts = sorted(set(counts))
    if max(counts) > 1 and args.hosts:
        if args.node_exec or args.master_addr:
            raise UsageError(
                "--hosts starts the nodes itself: give it without --node-exec and --master-addr"
            )
        hosts = parse_hosts(args.hosts)
        if len(hosts) < max(counts):
            raise UsageError(
                f"--nodes {args.nodes} needs {max(counts)} hosts, --hosts names {len(hosts)}"
            )
    elif max(counts) > 1:
        if not args.node_exec or "{node}" not in args.node_exec:
            raise UsageError(
                "--nodes above 1 needs --hosts h0,h1 (ssh), or --node-exec with {node} in it "
                "(e.g. --node-exec 'ip netns exec ns{node}') and --master-addr"
            )
        if not args.master_addr:
            raise UsageError("--nodes above 1 needs --master-addr (node 0's address)")
        if not 0 < args.master_port < 65000:
            raise UsageError(f"--master-port {args.master_port} is outside 1..64999")
    return counts


def expand(specs: list[RunSpec], args: argparse.Namespace) -> list[RunSpec]:
    """Each run once per node count, in place (rounds interleaved); K-node runs use the wrapper."""
    counts = node_counts(args)
    out: list[RunSpec] = []
    for spec in specs:
        for k in counts:
            if k == 1:
                out.append(spec)
                continue
            if spec.all_cores:  # the one-process baseline has no multi-node twin
                continue
            port = args.master_port + len(out)
            command = (
                _hosts_command(args, k, spec.command)
                if args.hosts
                else [
                    spec.command[0],
                    "-m",
                    "distrain.tools.bench.study.nodes",
                    "launch",
                    "--nnodes",
                    str(k),
                    "--node-exec",
                    args.node_exec,
                    "--master-addr",
                    args.master_addr,
                    "--master-port",
                    str(port),
                    "--",
                    *spec.command,
                ]
            )
            out.append(
                RunSpec(
                    f"{k}nodes-{spec.name}",
                    k * spec.nproc,
                    spec.sync_bn,
                    command,
                    spec.threads,
                    spec.round,
                )
            )
    return out


def _hosts_command(args: argparse.Namespace, k: int, command: list[str]) -> list[str]:
    """`command` (``python -m distrain.cli run ...``) across the first `k` of --hosts, by ssh."""
    names = ",".join(h.name for h in parse_hosts(args.hosts)[:k])  # -n in `command` sets the slots
    ssh = ["--ssh-opts", args.ssh_opts] if args.ssh_opts else []
    # the run's thread count is the bench's choice: the hosts forward DISTRAIN_* on their own
    return [*command[:4], "--hosts", names, *ssh, "-x", "OMP_NUM_THREADS", *command[4:]]


def describe(label: str, args: argparse.Namespace) -> str:
    """The workload label, with the links named when the study spans nodes."""
    if max(node_counts(args)) == 1:
        return label
    return f"{label}, nodes {args.nodes} linked by {args.link_label or 'an unnamed network'}"


def _node_argv(args: argparse.Namespace, node: int, command: list[str]) -> list[str]:
    """`command` (``python -m distrain.cli run ...``) as node `node` runs it."""
    env = [
        f"{k}={v}"
        for k, v in sorted(os.environ.items())
        if k.startswith(FORWARD_PREFIXES) or k in FORWARD_NAMES
    ]
    if command[1:4] != ["-m", "distrain.cli", "run"]:
        raise UsageError("the launched command must be `python -m distrain.cli run ...`")
    flags = [
        "--nnodes",
        str(args.nnodes),
        "--node-rank",
        str(node),
        "--master-addr",
        args.master_addr,
        "--master-port",
        str(args.master_port),
    ]
    return (
        shlex.split(args.node_exec.replace("{node}", str(node)))
        + ["env", *env]
        + command[:4]
        + flags
        + command[4:]
    )


def launch(argv: list[str]) -> int:
    """Start every node's launcher, wait for all; the first failure stops the rest, is the exit."""
    p = argparse.ArgumentParser(prog="python -m distrain.tools.bench.study.nodes launch")
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--node-exec", required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    line = split(argv, p)  # this parser's options, then the command (after ``--``, dropped)
    args = p.parse_args(line.launcher_argv)
    command = list(line.script_argv)
    procs = [
        subprocess.Popen(_node_argv(args, i, command), start_new_session=True)
        for i in range(args.nnodes)
    ]

    def stop(*_: Any) -> None:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)

    def on_term(*_: object) -> None:
        stop()
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    try:
        while True:
            codes = [proc.poll() for proc in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                print(
                    f"distrain bench nodes: node {codes.index(failed[0])} exited with {failed[0]}; "
                    "stopping the others",
                    file=sys.stderr,
                )
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    finally:
        stop()


def combine(dirs: list[str]) -> str:
    """One Markdown table from several scaling studies (e.g. one per link speed)."""
    lines = [
        "| links | run | nodes | processes | samples/s | vs 1 node | efficiency | test acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in dirs:
        results = json.loads((Path(d) / "results.json").read_text(encoding="utf-8"))
        link = results.get("links") or results["workload"]
        configs = results["configs"]
        one_node = {
            c["nproc"]: c for c in configs if "nodes-" not in c["name"] and c.get("samples_per_s")
        }
        for c in configs:
            k = int(c["name"].split("nodes-")[0]) if "nodes-" in c["name"] else 1
            per_node = c["nproc"] // k
            base = one_node.get(per_node)
            vs = (
                f"{c['samples_per_s'] / base['samples_per_s']:.2f}x"
                if base and c.get("samples_per_s")
                else "—"
            )
            eff = f"{100 * c['efficiency']:.0f} %" if c.get("efficiency") is not None else "—"
            acc = f"{c['final_test_acc']:.3f}" if c.get("final_test_acc") is not None else "—"
            sps = f"{c['samples_per_s']:.0f}" if c.get("samples_per_s") else c["status"]
            lines.append(
                f"| {link} | {c['name']} | {k} | {c['nproc']} | {sps} | {vs} | {eff} | {acc} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`python -m distrain.tools.bench.study.nodes launch|combine ...`."""
    if argv[:1] == ["launch"]:
        try:
            return launch(argv[1:])
        except UsageError as err:
            print(f"distrain bench nodes: error: {err}", file=sys.stderr)
            return 2
    if argv[:1] == ["combine"] and argv[1:]:
        print(combine(argv[1:]))
        return 0
    print("usage: python -m distrain.tools.bench.study.nodes launch|combine ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
