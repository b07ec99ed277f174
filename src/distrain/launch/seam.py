"""The launcher's one seam: each optional feature of `distrain run` is a :class:`Feature`.

The core (launch/cli.py, launch/plan.py, launch/agent.py) reads the command line, plans, runs
torch's agent and prints the end-of-job lines without naming a feature.  A feature (fast start,
rehearsal, self-start, replicas, hosts) hooks in at the same few points:

- it adjusts the command line before the plan (:meth:`Feature.before_plan`: the fan-out to
  hosts runs there, before ``import torch``, the fast start forks its server early, a host of
  the fan-out waits for its go) and the plan before it is frozen (:meth:`Feature.adjust`);
- it wraps the agent (:meth:`Feature.wrap`: its entrypoint and start method), or takes the job
  over once planned (:meth:`Feature.take_over`: the replica groups, the dry run);
- it gives its end-of-job lines (:meth:`Feature.end_lines`) and closes what it started.

Which features a run uses is decided from the command line (and the environment a parent
launcher set) by :data:`FEATURES`, without importing them: a feature's module is imported only
when asked, so a ``--start-method spawn`` launch of a plain script imports none.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distrain.contract import CPU_REHEARSAL, HOST_GO_FD, REPLICA_GROUP
from distrain.launch.command_line import CommandLine
from distrain.launch.options.run_options import HOST_LIST

if TYPE_CHECKING:
    from distrain.launch.agent import Agent
    from distrain.launch.launch_plan import LaunchPlan, StartMethod
    from distrain.launch.nodes.network import NetworkChoice


@dataclass
class Draft:
    """The plan while the features adjust it (launch/plan.py freezes it afterwards)."""

    command: CommandLine
    parsed: argparse.Namespace
    #: the agent's options (torchrun's and distrain's), by dest
    args: dict[str, Any]
    #: the environment distrain adds for the workers
    env: dict[str, str]
    #: the processes per node the command line asks for
    nproc: int
    start: StartMethod
    #: said on stderr when the job starts, in order
    lines: list[str] = field(default_factory=list)
    network: NetworkChoice | None = None

    @property
    def reads_script(self) -> bool:
        """Whether the job runs a Python file distrain can read (not ``-m``, ``--no-python``)."""
        return not (self.parsed.module or self.parsed.no_python)


class Feature:
    """One optional feature of `distrain run`: every hook does nothing unless overridden."""

    #: the feature checks the command line itself, or fills tokens of it later (a host of the
    #: fan-out before its go): the core checks nothing before ``import torch``
    checks_command = False

    def before_plan(self, command: CommandLine) -> CommandLine | int:
        """The command line to plan (adjusted), or the exit code when the job ends here."""
        return command

    def adjust(self, draft: Draft) -> None:
        """Adjust the plan before it is frozen (environment, processes, start method, lines)."""

    def take_over(self, launch: LaunchPlan) -> int | None:
        """Run the planned job in place of the core (its exit code), or None to leave it."""
        return None

    def wrap(self, agent: Agent) -> Agent:
        """The agent to run: `agent`, or one with another entrypoint and start method."""
        return agent

    def end_lines(self, folder: str | None) -> None:
        """Print the feature's end-of-job lines (from the job's event stream in `folder`)."""

    def close(self) -> None:
        """Stop what the feature started (called once the job ended, or was refused)."""


def _script_may_start_workers(command: CommandLine) -> bool:
    """A cheap look before launch/self_start/ reads the script: its text names a starter."""
    if command.has("self_starting", "module", "no_python"):
        return command.has("self_starting")
    try:
        with open(command.script or "", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return any(word in text for word in ("spawn", "start_processes", "Process", "Pool"))


Wanted = Callable[[CommandLine | None], bool]
#: the features in the order their hooks run, each with when a run wants it (`command` None:
#: from the environment alone, before the command line is read) and the module that makes it
FEATURES: tuple[tuple[str, Wanted, str], ...] = (
    ("hosts", lambda c: c is not None and c.has(*HOST_LIST), "distrain.launch.hosts.feature"),
    (
        "fast_start",
        lambda c: c is not None and (c.value("start_method") or "fast") != "spawn",
        "distrain.launch.fast_start.feature",
    ),
    ("host_go", lambda c: HOST_GO_FD in os.environ, "distrain.launch.hosts.feature"),
    (
        "replicas",
        lambda c: REPLICA_GROUP in os.environ or (c is not None and c.has("replicas")),
        "distrain.launch.replicas.feature",
    ),
    (
        "self_start",
        lambda c: c is not None and not c.has("cpu") and _script_may_start_workers(c),
        "distrain.launch.self_start.feature",
    ),
    (
        "rehearse",
        lambda c: CPU_REHEARSAL in os.environ or (c is not None and c.has("cpu")),
        "distrain.launch.rehearse.feature",
    ),
    ("dry_run", lambda c: c is not None and c.has("dry_run"), "distrain.launch.report.dry_run"),
)


class Features:
    """The features one `distrain run` uses, in :data:`FEATURES` order; each hook is called on
    every one of them."""

    def __init__(self) -> None:
        self._on: dict[str, Feature] = {}

    def see(self, command: CommandLine | None) -> Features:
        """Turn on the features the environment and `command` (None: the environment alone)
        ask for."""
        for name, wanted, module in FEATURES:
            if name not in self._on and wanted(command):
                self._on[name] = importlib.import_module(module).feature(name)
        self._on = {name: self._on[name] for name, _, _ in FEATURES if name in self._on}
        return self

    @property
    def names(self) -> list[str]:
        """The features on, in order."""
        return list(self._on)

    def checks_before_torch(self) -> bool:
        """Whether the core checks the command line before ``import torch``."""
        return not any(f.checks_command for f in self._on.values())

    def before_plan(self, command: CommandLine) -> CommandLine | int:
        """The command line every feature adjusted, or the exit code of one that ended it."""
        for f in list(self._on.values()):
            adjusted = f.before_plan(command)
            if isinstance(adjusted, int):
                return adjusted
            command = adjusted
        return command

    def adjust(self, draft: Draft) -> None:
        """Every feature adjusts the plan."""
        for f in self._on.values():
            f.adjust(draft)

    def take_over(self, launch: LaunchPlan) -> int | None:
        """The exit code of the first feature that runs the planned job itself, or None."""
        return next((c for f in self._on.values() if (c := f.take_over(launch)) is not None), None)

    def wrap(self, agent: Agent) -> Agent:
        """The agent every feature wrapped, in order."""
        for f in self._on.values():
            agent = f.wrap(agent)
        return agent

    def end_lines(self, folder: str | None) -> None:
        """Every feature's end-of-job lines."""
        for f in self._on.values():
            f.end_lines(folder)

    def close(self) -> None:
        """Close every feature (twice is harmless)."""
        for f in self._on.values():
            f.close()
