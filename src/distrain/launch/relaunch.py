"""Tools that need several ranks re-launch themselves through `distrain run` when run plainly."""

from __future__ import annotations

import argparse

from distrain.launch.command_line import split

#: the tool's option (dest) that names its processes: the relaunched ranks must not launch again
NPROC_DEST = ("nproc",)
#: and the ones that name its hosts (`distrain run --hosts` is given them in its own words)
HOST_DESTS = ("hosts", "hostfile", "ssh_opts")


def tool_argv(
    argv: list[str], parser: argparse.ArgumentParser, dests: tuple[str, ...] = NPROC_DEST
) -> list[str]:
    """The tool's `argv`, split by its own `parser`, without the options `dests` (-n/--nproc)."""
    return split(argv, parser).argv_without(*dests)


def relaunch(
    module: str, argv: list[str], parser: argparse.ArgumentParser, nproc: str | int
) -> int:
    """Run ``distrain run -n <nproc> -m <module> <argv minus -n>``; returns the job's exit code."""
    from distrain.launch.cli import main as launch_main

    return launch_main(["-n", str(nproc), "-m", module, *tool_argv(argv, parser)])


def relaunch_on_hosts(
    module: str,
    argv: list[str],
    parser: argparse.ArgumentParser,
    hosts: list[str],
    nproc: str | int,
) -> int:
    """Run ``distrain run --hosts … --quiet-hosts -n <nproc> -m <module> <argv>`` (argv without
    -n and the host options), so that the tool's ranks run on every host; rank 0's host prints."""
    from distrain.launch.cli import main as launch_main

    return launch_main(
        [
            *hosts,
            "--quiet-hosts",
            "-n",
            str(nproc),
            "-m",
            module,
            *tool_argv(argv, parser, NPROC_DEST + HOST_DESTS),
        ]
    )
