"""Record the reader's path: the distrain modules on the stack whenever distrain hands work over.

Loaded by scripts/structure_metrics.py (this folder first on PYTHONPATH, inherited by every
process of the job) when READER_PATH_OUT names a file.  A hand-over is a call from a distrain
frame into torch's distributed engine (torch.distributed, torch.nn.parallel), its data loading
(torch.utils.data), an optimizer's step, or the start of a process (subprocess, multiprocessing,
os.fork, exec).  At each new hand-over site the distrain modules on the whole stack are written
out: they are the modules a reader opens to follow how `distrain run` gets there.
"""

import os
import sys

_OUT = os.environ.get("READER_PATH_OUT")
_ENGINE = (
    "/torch/distributed/",
    "/torch/nn/parallel/",
    "/torch/utils/data/",
    "/torch/optim/optimizer.py",
    "/subprocess.py",
    "/multiprocessing/",
)
_PROCESS_CALLS = ("fork", "posix_spawn", "execve", "execv", "fork_exec")
_seen: set[tuple[str, int]] = set()


def _distrain(filename: str) -> bool:
    return "/distrain/" in filename and "/scripts/" not in filename


def _record(frame, site: tuple[str, int]) -> None:  # type: ignore[no-untyped-def]
    if site in _seen:
        return
    _seen.add(site)
    modules = []
    while frame is not None:
        name = frame.f_code.co_filename
        if _distrain(name):
            modules.append(name.rsplit("/src/", 1)[-1])
        frame = frame.f_back
    if modules:
        fd = os.open(_OUT or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (" ".join(modules) + "\n").encode())
        os.close(fd)


def _profile(frame, event, arg):  # type: ignore[no-untyped-def]
    if event == "call":
        caller = frame.f_back
        if caller is None or not _distrain(caller.f_code.co_filename):
            return
        if any(part in frame.f_code.co_filename for part in _ENGINE):
            _record(caller, (caller.f_code.co_filename, caller.f_lineno))
    elif event == "c_call" and getattr(arg, "__name__", "") in _PROCESS_CALLS:
        if _distrain(frame.f_code.co_filename):
            _record(frame, (frame.f_code.co_filename, frame.f_lineno))


if _OUT:
    import threading

    sys.setprofile(_profile)
    threading.setprofile(_profile)
