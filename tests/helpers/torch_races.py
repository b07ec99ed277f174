"""torch's own races that a passing run may still end in, each matched by its exact signature.

torch 2.14's gloo exit race (docs/compatibility.md, "torch's gloo exit race"): a plain script's
last DDP all-reduce can still be dropped by gloo's ``pt_gloo_runloop`` thread when Python is
already finalizing; the work's thread-local state holds the ``contextvars`` copy backward
stashes, its decref needs the GIL, the thread exits inside a destructor and libstdc++ aborts.
Any process that trained with DDP on gloo without ``distrain.init()`` and ends through
``Py_FinalizeEx`` (a torchrun worker, an ``mp.spawn`` child, a ``--start-method spawn`` worker)
is exposed; the fast start's forked workers end with ``os._exit`` and are not.

A test whose point is the result (every record, digest or saved model is still checked) accepts
this end with ``torch_exit_race(result, launcher)``; nothing else about the exit is forgiven.
"""

from __future__ import annotations

import re
from typing import Any

#: what libstdc++ prints when the aborting gloo thread calls std::terminate
TERMINATE = "terminate called without an active exception"
#: launcher → (its exit code when one process aborted, the line it prints about that process)
SIGNATURES = {
    # distrain run (a spawned worker): "... was killed by SIGABRT", then the job's 128 + 6
    "distrain": (134, re.compile(r"was killed by SIGABRT")),
    # python script.py with mp.spawn: the parent raises ProcessExitedException, Python exits 1
    "mp.spawn": (
        1,
        re.compile(r"ProcessExitedException: process \d+ terminated with signal SIGABRT"),
    ),
    # torchrun: ChildFailedError's summary for a worker ended by a signal, torchrun exits 1
    "torchrun": (1, re.compile(r"Signal 6 \(SIGABRT\) received by PID \d+")),
}


def torch_exit_race(result: Any, launcher: str) -> bool:
    """Whether `result` (a finished process) ended in torch's gloo exit race and nothing else:
    `launcher`'s exit code for one aborted process, libstdc++'s terminate line and the
    launcher's own line naming SIGABRT, all three. `launcher` has no default: each launcher
    reports the abort its own way, and a wrong one silently never matches."""
    code, said = SIGNATURES[launcher]
    err = getattr(result, "stderr", "") or ""
    return result.returncode == code and TERMINATE in err and said.search(err) is not None
