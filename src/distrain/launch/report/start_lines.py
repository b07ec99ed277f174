"""What `distrain run` says when the job starts, before torch's agent runs: the network this
node uses (a multi-node job, with its warnings) and the features' start lines
(launch/seam.py ``Draft.lines``: what stands in for what under ``--cpu``, a script that starts
its own workers)."""

from __future__ import annotations

import sys

from distrain.launch.command_line import PROG
from distrain.launch.launch_plan import LaunchPlan


def say_network(launch: LaunchPlan) -> None:
    """Print the network this node uses (a multi-node job), with its warnings, on stderr."""
    choice = launch.network
    if choice is None:
        return
    a = launch.args
    static = a.rdzv_backend == "static" and not a.rdzv_endpoint
    node = f"node {a.node_rank}/{a.nnodes}" if static else f"elastic node ({a.nnodes} nodes)"
    for warning in choice.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
    print(choice.summary(node), file=sys.stderr, flush=True)


def say(launch: LaunchPlan) -> None:
    """The network, then the features' start lines in one write (the launchers of a job on one
    machine say their lines at once)."""
    say_network(launch)
    sys.stderr.write("".join(line + "\n" for line in launch.start_lines))
    sys.stderr.flush()
