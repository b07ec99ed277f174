"""The fan-out to many machines behind the launcher's seam (launch/seam.py): ``--hosts``
runs the job from here over ssh; a host's `distrain run` waits for the launcher's go."""

from __future__ import annotations

from distrain.launch.command_line import CommandLine
from distrain.launch.seam import Feature


class FanOut(Feature):
    """``--hosts``/``--hostfile``: one command for many machines (launch/hosts/run.py)."""

    #: its options are read by launch/hosts/options.py, the rest by each host's `distrain run`
    checks_command = True

    def before_plan(self, command: CommandLine) -> CommandLine | int:
        """Run the fan-out: it starts nothing here but ssh, and needs no ``import torch``."""
        from distrain.launch.hosts import run

        return run.main(command)


class HostGo(Feature):
    """A host's `distrain run`, started by the fan-out before its verdict (launch/hosts/go.py):
    its address and port are tokens until the go."""

    checks_command = True

    def __init__(self) -> None:
        from distrain.launch.hosts import go

        self.fd = go.take_fd()  # before any worker or server could inherit it

    def before_plan(self, command: CommandLine) -> CommandLine | int:
        """Wait for the go (torch is imported meanwhile): the master's address, or a stop."""
        import torch.distributed.run  # noqa: F401 - the plan's parser; imported before the wait

        from distrain.launch.hosts import go

        if self.fd is None:
            return command
        told = go.read_go(self.fd)
        return go.NOT_STARTED if told is None else go.fill(command, told)


def feature(name: str) -> Feature:
    """The hosts' hooks (launch/seam.py): the fan-out, or one host's wait for its go."""
    return HostGo() if name == "host_go" else FanOut()
