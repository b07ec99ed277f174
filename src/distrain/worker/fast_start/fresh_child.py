"""The fresh interpreter a forked worker falls back to: its stderr passed through, its cause kept.

A script that fails in a forked worker before training with an error the fork may have caused
(a RuntimeError or OSError) is rerun in a fresh ``python -u script.py``.  If that interpreter
fails too before the script imported distrain, nothing writes the agent's error file, and
`distrain run`'s last line could only say "exited with code 1".  The child's stderr is
therefore copied through as it comes (the user sees the same traceback, live), its tail kept,
and the last exception line of the tail becomes the error file's message when the child
wrote none.  The first worker to fall back says why (:func:`announce`), once for the node.
"""

# Environment boundary (scripts/structure_metrics.py ENV_BOUNDARY): builds a fresh
# interpreter's environment and reads what the failed child left, outside any worker.
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from distrain.contract import ERROR_FILE
from distrain.events import emit
from distrain.log import get_logger

_log = get_logger("runtime")

#: the tail of the child's stderr kept to find its last exception line
_TAIL_BYTES = 16384
#: "ValueError: …", "torch.OutOfMemoryError: …", "[rank0]: RuntimeError: …" (torch's prefix)
_EXCEPTION_LINE = re.compile(
    r"^(?:\[rank\d+\]: )?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*)$"
)


def last_exception_line(text: str) -> str | None:
    """The last line of a Python traceback's text that names an exception (None if none does)."""
    for line in reversed(text.splitlines()):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return match.group(1)
    return None


def _copy_through(source: int, keep: bytearray) -> None:
    """Copy `source` to our stderr until it closes, keeping its last bytes in `keep`."""
    while True:
        try:
            chunk = os.read(source, 65536)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        with contextlib.suppress(OSError):
            view = memoryview(chunk)
            while view:
                view = view[os.write(2, view) :]
        keep.extend(chunk)
        del keep[:-_TAIL_BYTES]
    os.close(source)


def run_fresh_child(
    argv: list[str],
    preexec_fn: Callable[[], None],
    on_start: Callable[[subprocess.Popen[bytes]], None],
) -> int:
    """Run `argv`, its stderr copied to ours; return its exit code (negative: killed by a signal).

    `on_start` gets the child as soon as it runs (to forward signals to it).  When the child
    failed and wrote no error file, one is written from its last exception line, so the agent
    names the cause; a failure caused by a peer leaving is left unnamed, as distrain's own
    excepthook leaves it.
    """
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(argv, stderr=write_end, preexec_fn=preexec_fn)
    os.close(write_end)
    on_start(proc)
    tail = bytearray()
    copier = threading.Thread(target=_copy_through, args=(read_end, tail), daemon=True)
    copier.start()
    code = proc.wait()
    copier.join(timeout=5.0)  # a grandchild still holding the pipe must not hold us
    error_file = os.environ.get(ERROR_FILE)
    if code > 0 and error_file and not os.path.exists(error_file):
        cause = last_exception_line(bytes(tail).decode(errors="replace"))
        if cause is not None and not _is_peer_failure_text(cause):
            _write_cause(error_file, cause, bytes(tail).decode(errors="replace"))
    return code


def _is_peer_failure_text(line: str) -> bool:
    from distrain.worker.lifecycle.failure import is_peer_failure_line

    return is_peer_failure_line(line)


def _write_cause(path: str, message: str, text: str) -> None:
    from distrain.settings import for_report
    from distrain.worker.lifecycle.failure import write_error_message

    with contextlib.suppress(OSError):
        write_error_message(path, message, text, for_report())


def announce(marker: str, reason: str) -> None:
    """Record that the script needs fresh interpreters; the first worker to do so says why.

    The marker (made once, whoever is first) is coordination: it sends this node's later
    workers and restarts to fresh interpreters.  The why is said at once, on this worker's
    stderr (a long job's user learns it when it happens, not at the end), and kept as a
    ``fallback`` event in the job's stream.
    """
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    first = (reason.strip().splitlines() or [reason])[0]
    _log.warning(
        f"distrain run: {first}; running workers in fresh interpreters instead "
        "(--start-method spawn skips the fork)"
    )
    emit("fallback", reason=first)


def _die_with_parent() -> None:
    """In the fresh child: SIGKILL when this forked worker dies (the agent only knows our pid)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_fresh(script: str, script_args: tuple[str, ...]) -> None:
    """Run the script in a fresh interpreter and end this worker the way that child ended."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    python = os.environ.get("PYTHON_EXEC", sys.executable)  # torchrun's interpreter override

    def forward_signals(proc: subprocess.Popen[bytes]) -> None:
        def forward(signum: int, _frame: object) -> None:
            proc.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, forward)

    code = run_fresh_child([python, "-u", script, *script_args], _die_with_parent, forward_signals)
    if code < 0:  # killed by a signal: die by the same one so the agent reports it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    if code:
        raise SystemExit(code)
