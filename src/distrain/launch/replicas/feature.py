"""``--replicas`` behind the launcher's seam (launch/seam.py): the node's launcher runs the
replica groups, each group's own launcher reports its lost workers."""

from __future__ import annotations

import os

from distrain.contract import REPLICA_GROUP
from distrain.launch.agent import Agent
from distrain.launch.plan import LaunchPlan, visible_gpu_count
from distrain.launch.seam import Feature


class Replicas(Feature):
    """The groups (launch/replicas/groups.py) and their events (launch/replicas/events.py)."""

    def take_over(self, launch: LaunchPlan) -> int | None:
        """Run this node's groups, each with a launcher of its own that forks its workers."""
        if launch.args.replicas is None:
            return None
        from distrain.launch.replicas import groups

        return groups.run(launch, visible_gpu_count())

    def wrap(self, agent: Agent) -> Agent:
        """One group's launcher: its dead workers reach the launcher above."""
        if os.environ.get(REPLICA_GROUP) is not None:
            from distrain.launch.replicas.events import report_losses_from_agent

            report_losses_from_agent()
        return agent


def feature(name: str) -> Feature:
    """The replicas' hooks (launch/seam.py)."""
    return Replicas()
