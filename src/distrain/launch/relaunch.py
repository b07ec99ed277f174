"""Tools that need several ranks re-launch themselves through `distrain run` when started plainly."""

from __future__ import annotations


def strip_nproc(argv: list[str], names: tuple[str, ...] = ("-n", "--nproc")) -> list[str]:
    """`argv` without the options `names` and their values (the launched workers must not launch again)."""
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok in names:
            skip = True
            continue
        if tok.startswith(tuple(f"{name}=" for name in names)):
            continue
        out.append(tok)
    return out


def relaunch(module: str, argv: list[str], nproc: str | int) -> int:
    """Run ``distrain run -n <nproc> -m <module> <argv minus -n>``; returns the job's exit code."""
    from .cli import main as launch_main

    return launch_main(["-n", str(nproc), "-m", module, *strip_nproc(argv)])


#: the options that name the hosts of a tool run on several machines (`distrain run --hosts`)
HOST_FLAGS = ("--hosts", "--hostfile", "--ssh-opts")


def relaunch_on_hosts(module: str, argv: list[str], hosts: list[str], nproc: str | int) -> int:
    """Run ``distrain run --hosts … --quiet-hosts -n <nproc> -m <module> <argv>`` (argv without
    -n and the host options), so that the tool's ranks run on every host; rank 0's host prints."""
    from .hosts_run import main as hosts_main

    rest = strip_nproc(argv, ("-n", "--nproc", *HOST_FLAGS))
    return hosts_main([*hosts, "--quiet-hosts", "-n", str(nproc), "-m", module, *rest])
