"""Where the suite's CPU goes: with ``DTEST_CPU_LOG=DIR`` set, each test's wall time and
the CPU seconds of the test process and of the children it waited for (the jobs it started:
launchers, and through them their workers) are appended to ``DIR/<pid>.jsonl``, one line a
test; ``python3 scripts/suite_cpu.py DIR`` sums them by file (tests/RESULTS.md).

CPU, not wall, because the suite is CPU-bound on 2 cores: a test's wall time there is mostly
the other workers' jobs.  A process nobody waits for (a daemon, a process in a network
namespace entered with ``ip netns exec`` and not waited, sshd's children) is not counted."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: the folder the lines go to; unset: nothing is recorded
VARIABLE = "DTEST_CPU_LOG"
#: read once, at the start (a test may clear the environment)
FOLDER = os.environ.get(VARIABLE)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


@contextmanager
def recorded(nodeid: str, folder: str | None = FOLDER) -> Iterator[None]:
    """Record the test `nodeid` (setup, call and teardown) in `folder`, when there is one."""
    if not folder:
        yield
        return
    start, cpu = time.monotonic(), _cpu()
    try:
        yield
    finally:
        line = {"id": nodeid, "wall": time.monotonic() - start, "cpu": _cpu() - cpu}
        Path(folder).mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
