"""`distrain run --cpu`, launcher side: the environment that makes workers rehearse on CPU.

The workers do the mapping (distrain.worker.rehearse, never imported here): this side only sets
``DISTRAIN_CPU_REHEARSAL`` (the number of stand-in GPUs) and PYTHONPATH (the folder whose
sitecustomize.py installs the rehearsal in fresh interpreters), prints the start line, and at the
end the summary of the GPU calls the workers mapped (their ``rehearsal`` events in the job's
stream).

A script that starts its own processes (the PyTorch DDP tutorial: ``world_size =
torch.cuda.device_count(); mp.spawn(main, nprocs=world_size)``, or a loop of
``multiprocessing.Process``; see launch/self_start/detect.py) runs once, as on a GPU machine; its
children are the N processes.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

from distrain.contract import CPU_REHEARSAL
from distrain.events import job_events
from distrain.launch.self_start import detect as selfstart
from distrain.settings import rehearse_boot_dir

PROG = "distrain run --cpu"


def configure(
    script: str, nproc: int, env: dict[str, str], found: selfstart.SelfStart | None
) -> tuple[int, str]:
    """Set the workers' environment for `nproc` stand-in GPUs; (agent processes, start line).

    `found`: what the script starts itself, decided by launch/self_start/detect.decide (None: N
    copies).
    """
    env[CPU_REHEARSAL] = str(nproc)
    path = os.environ.get("PYTHONPATH", "")
    env["PYTHONPATH"] = rehearse_boot_dir() + (os.pathsep + path if path else "")
    who = (
        f"{nproc} CPU processes stand in for {nproc} GPUs"
        if nproc != 1
        else "1 CPU process stands in for 1 GPU"
    )
    line = f"{PROG}: {who}; cuda → cpu, nccl → gloo"
    if found is None:
        return nproc, line
    selfstart.mark(env)
    name = os.path.basename(script)
    where = f"{found.kind} at line {found.line}" if found.line else found.kind
    return 1, f"{line} ({name} starts them itself: {where}; it runs once)"


def summary(folder: str | None) -> str | None:
    """One line: the GPU calls the workers mapped (their ``rehearsal`` events in the job's
    stream, distrain/events/), summed over processes (None: nothing mapped)."""
    total: Counter[str] = Counter()
    processes = 0
    for event in job_events(folder, "rehearsal"):
        try:
            total.update({str(k): int(v) for k, v in event["counts"].items()})
        except (KeyError, AttributeError, TypeError, ValueError):
            continue
        processes += 1
    if not total:
        return None
    calls = ", ".join(
        f"{call} ×{n}" for call, n in sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"{PROG}: mapped in {processes} process{'es' if processes != 1 else ''}: {calls}"


def finish(folder: str | None) -> None:
    """Print the summary (the job's folder goes with the breakdown's lines after it)."""
    line = summary(folder)
    if line:
        sys.stderr.write(line + "\n")  # one write: under --replicas every group says it at once
        sys.stderr.flush()
