"""The scaling study's runs in order: process counts, BN and SyncBN, rounds interleaved in time."""

from __future__ import annotations

import os
from pathlib import Path

from distrain.tools.bench.study import runner


def plan_runs(
    nprocs: list[int],
    sync_bn: str,
    script: str,
    script_args: list[str],
    threads: int,
    out: Path,
    builtin: bool,
    repeat: int = 1,
    all_cores: int = 0,
) -> list[runner.RunSpec]:
    """The study's runs in order: `repeat` rounds of (each N: BN, then SyncBN if asked, N > 1).

    Rounds are interleaved (1, 2, 1, 2, …) rather than repeated back to back, so a burst of
    load from elsewhere on the machine hits every configuration instead of one.  With
    ``all_cores`` > `threads` and 1 in `nprocs`, each round also runs one process with that
    many threads: the baseline a CPU user has without distrain.
    """
    one_round = _plan_round(nprocs, sync_bn, script, script_args, threads, out, builtin)
    if all_cores > threads and 1 in nprocs:
        single = next(s for s in one_round if s.nproc == 1)
        cmd = [
            tok.replace(f"{os.sep}n1-bn{os.sep}", f"{os.sep}n1-allcores{os.sep}")
            for tok in single.command
        ]
        one_round.insert(1, runner.RunSpec("n1-allcores", 1, False, cmd, all_cores, all_cores=True))
    return [
        runner.RunSpec(s.name, s.nproc, s.sync_bn, s.command, s.threads, k, s.all_cores)
        for k in range(1, repeat + 1)
        for s in one_round
    ]


def _plan_round(
    nprocs: list[int],
    sync_bn: str,
    script: str,
    script_args: list[str],
    threads: int,
    out: Path,
    builtin: bool,
) -> list[runner.RunSpec]:
    specs = []
    for n in nprocs:
        modes = {"off": [False], "on": [True], "both": [False, True]}[sync_bn]
        if n == 1:
            modes = [False]  # SyncBN on one process is plain BN: run it once
        for sbn in modes:
            name = f"n{n}-{'syncbn' if sbn else 'bn'}"
            args = list(script_args) + (["--sync-bn"] if sbn else [])
            if builtin:
                args += ["--out", str(out / "runs" / name / "artifacts")]
            cmd = [runner.python(), "-m", "distrain.cli", "run", "--nproc", str(n), script, *args]
            specs.append(
                runner.RunSpec(name=name, nproc=n, sync_bn=sbn, command=cmd, threads=threads)
            )
    return specs
