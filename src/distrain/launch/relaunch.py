"""Tools that need several ranks re-launch themselves through `distrain run` when started plainly."""

from __future__ import annotations


def strip_nproc(argv: list[str]) -> list[str]:
    """`argv` without -n/--nproc and its value (the launched workers must not launch again)."""
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok in ("-n", "--nproc"):
            skip = True
            continue
        if tok.startswith(("--nproc=", "-n=")):
            continue
        out.append(tok)
    return out


def relaunch(module: str, argv: list[str], nproc: str | int) -> int:
    """Run ``distrain run -n <nproc> -m <module> <argv minus -n>``; returns the job's exit code."""
    from .cli import main as launch_main

    return launch_main(["-n", str(nproc), "-m", module, *strip_nproc(argv)])
