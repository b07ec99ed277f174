"""The process group's native threads still alive in this process (imported by test scripts).

gloo's loops (pt_gloo_runloop, gloo_tcp_loop) and rank 0's store (pt_tcpstore_uv) must be gone
before interpreter teardown: a group that outlives distrain's shutdown is how an exit aborts with
"terminate called without an active exception".  Registered with atexit *before* distrain.init,
the check runs after distrain's own exit handler (atexit is last-in, first-out).
"""

import atexit
import os
from collections.abc import Callable

GROUP_THREADS = ("gloo", "tcpstore")


def group_threads() -> list[str]:
    """Names of this process's threads that belong to a c10d group or store."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass  # the thread ended meanwhile
    return sorted(n for n in names if any(g in n for g in GROUP_THREADS))


def report_at_exit(write: Callable[[str], object] = print) -> None:
    """At the very end, `write` one line: ``group threads at exit: [...]``."""
    atexit.register(lambda: write(f"group threads at exit: {group_threads()}\n"))
