"""When one rank fails: report the root cause once, and keep the other ranks' echoes to a line.

Under torch's elastic agent (torchrun, ``distrain run``) each worker has an error file
(``TORCHELASTIC_ERROR_FILE``); the agent reads it to name the root cause of a failed job, which
is what ``@record`` from ``torch.distributed.elastic.multiprocessing.errors`` writes.  This module
does the same from ``sys.excepthook`` so user scripts need no decorator, with one refinement:
a rank whose collective failed *because a peer died* (a DistNetworkError, gloo's "Connection
closed by peer") is a consequence, not a cause.  It prints one line instead of a second
traceback and writes no error file, so the agent and ``distrain run`` report the real cause.

The file is written through torch's ``ErrorHandler`` (worker/lifecycle/root_cause.py, which says
what its subclass changes), in any process that imported torch; a process that never did writes
the same JSON itself, since importing torch at a torch-free script's exit fails ("can't register
atexit after shutdown").  The launcher reads the same JSON either way.

A failure is classified by its type first (:func:`is_peer_failure`): torch's
``DistNetworkError`` and ``DistStoreError`` are a lost peer's.  Its text is read only where torch
gives no type: gloo's transport errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
import traceback
from types import TracebackType
from typing import NoReturn

from distrain.errors import Abandoned, DistrainError
from distrain.events import emit
from distrain.log import get_logger
from distrain.process import patching
from distrain.settings import Settings
from distrain.worker.lifecycle.stop_job import stop_the_job

_log = get_logger("failure")

#: torch's own types for "another process went away": c10d's store and sockets raise
#: DistNetworkError when the peer's connection closes ("Failed to recv, got 0 bytes", "Broken
#: pipe") and DistStoreError when what a peer was to set never comes
_PEER_GONE_TYPES = ("DistNetworkError", "DistStoreError")

#: the text of a lost peer, read only where torch gives no type: gloo's transport errors reach
#: Python as a plain RuntimeError (ProcessGroupGloo re-raises gloo's IoException untyped; torch
#: 2.14.1, an all_reduce after the peer exited: "[…/gloo/transport/tcp/pair.cc:561] Connection
#: closed by peer"), and a DistBackendError says only that the backend failed, not whether a peer
#: made it fail.  Each known text → what it means, in a survivor's line ({peer}: the address in
#: it, when there is one): gloo's and the store's errors start with the C++ source line that
#: raised them, and the survivor's line was that text cut at 200 characters
_PEER_GONE = (
    ("Connection closed by peer", "its connection to {peer} closed: that process ended"),
    ("Connection reset by peer", "its connection to {peer} was reset: that process ended"),
    ("Broken pipe", "its connection to {peer} broke: that process ended"),
    ("Connection refused", "{peer} refused its connection: that process is gone"),
    ("Socket Timeout", "{peer} stopped answering (a socket timeout)"),
)
_SOURCE = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
_PEER = re.compile(r"\[?([0-9a-fA-F.:]+)\]?:\d+")
#: the longest a cause stays when no meaning is known (the message, without its source path)
LIMIT = 160
#: the types whose text is read (by name: the last part of ``module.Type``)
_UNTYPED = ("RuntimeError", "DistError", "DistBackendError")


_failing: list[bool] = []  # set once this process is going down with an error


def mark_failing() -> None:
    """Note that this process is ending with an error (its watchdog then does not wait for peers)"""
    _failing.append(True)


def failing() -> bool:
    """Whether this process is ending with an error (an uncaught exception, a non-zero exit)."""
    return bool(_failing)


def exit_abandoned(err: Abandoned) -> NoReturn:
    """The lifecycle's answer to a part that gave up (a save abandoned by the checkpoint writer).

    The part's line, then ``SystemExit`` with its code: the exit is decided here, not inside the
    part, and atexit handlers (the Context's shutdown) still run as after any exit.
    """
    _log.warning(err.line)
    raise SystemExit(err.exit_code)


def is_peer_failure(err: BaseException) -> bool:
    """True for collective/store errors caused by another process disappearing."""
    # only an error of a process that imported torch.distributed can be one of its types; a
    # script that never imported torch must not import it here (at exit, from the boot's
    # atexit hook, that import fails: "can't register atexit after shutdown")
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        types = tuple(getattr(dist, n, None) for n in _PEER_GONE_TYPES)
        if isinstance(err, tuple(t for t in types if isinstance(t, type))):
            return True
    # by the exact type: a subclass of RuntimeError (a DistrainError) is never gloo's
    untyped = type(err) is RuntimeError or (
        dist is not None and isinstance(err, getattr(dist, "DistError", ()))
    )
    return untyped and _names_a_lost_peer(str(err))


def is_peer_failure_line(line: str) -> bool:
    """:func:`is_peer_failure` for an exception known only by its last traceback line
    (``module.Type: message``), as another process printed it (worker/fast_start/fresh_child.py).
    """
    kind, sep, message = line.partition(": ")
    name = kind.strip().rpartition(".")[2]
    if not sep or not name.isidentifier():
        return False
    if name in _PEER_GONE_TYPES:
        return True
    return name in _UNTYPED and _names_a_lost_peer(message)


def _names_a_lost_peer(text: str) -> bool:
    return any(known in text for known, _ in _PEER_GONE)


def peer_cause(err: BaseException) -> str:
    """A peer's failure as a survivor says it: ``RuntimeError: its connection to 10.200.45.2
    closed: that process ended`` for a known peer error (the root cause is the other rank's own
    line); otherwise its first line without the C++ source path, cut at LIMIT."""
    first = (str(err).strip().splitlines() or [""])[0]
    text = _SOURCE.sub("", first)
    for known, meaning in _PEER_GONE:
        if known in text:
            found = _PEER.search(text[text.index(known) :])
            peer = f"the process at {found.group(1)}" if found else "a peer"
            return f"{type(err).__name__}: {meaning.format(peer=peer)}"
    cut = text if len(text) <= LIMIT else text[: LIMIT - 1].rstrip() + "…"
    return f"{type(err).__name__}: {cut}" if cut else type(err).__name__


def write_error_file(
    path: str, err: BaseException, tb: TracebackType | None, settings: Settings
) -> None:
    """Write the agent's error file for `err` (torch's ``ErrorHandler.record_exception``)."""
    if "torch" in sys.modules:
        from distrain.worker.lifecycle.root_cause import RootCause, cause_line

        RootCause(path).record_exception(err.with_traceback(tb))
        message = cause_line(err)
    else:  # no torch: no ProcessRaisedException either, its line is the cause
        message = f"{type(err).__name__}: {err}"
        callstack = "".join(traceback.format_exception(type(err), err, tb))
        _write_without_torch(path, message, callstack)
    _note_cause(message, settings)


def write_error_message(path: str, message: str, callstack: str, settings: Settings) -> None:
    """Write the agent's error file from a cause known by its line, and report it."""
    write_cause(path, message, callstack)
    _note_cause(message, settings)


def write_cause(path: str, message: str, callstack: str) -> None:
    """Write the agent's error file from a cause known by its line (torch's ``ErrorHandler``)."""
    if "torch" in sys.modules:
        from distrain.worker.lifecycle.root_cause import RootCause

        RootCause(path).record_cause(message, callstack)
    else:
        _write_without_torch(path, message, callstack)


def _write_without_torch(path: str, message: str, callstack: str) -> None:
    """The JSON of torch's ``ErrorHandler.record_exception``, in a process without torch."""
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time()))},
        }
    }
    with contextlib.suppress(OSError), open(path, "w") as f:
        json.dump(data, f)


def _note_cause(message: str, settings: Settings) -> None:
    """Report the cause to the launcher too (a ``failure`` event, distrain/events/).

    The agent names only the ranks that had exited when it noticed the first failure; a rank
    that raised can still be finalizing its interpreter then (its gloo connections close early
    in that, so its peer fails and exits first), and the agent stops it with SIGTERM.  The
    launcher finds its cause here (launch/report/job_summary.py).
    """
    emit("failure", settings.job_dir, message=message)


def print_traceback_block(rank: int | str, err: BaseException, header: str = "") -> None:
    """`err`'s traceback on stderr as one block, every line prefixed ``[rank N]:``.

    One write, not one per line: ranks failing at the same moment would otherwise interleave
    their tracebacks line by line on the terminal.
    """
    text = header + "".join(traceback.format_exception(type(err), err, err.__traceback__))
    block = "".join(f"[rank{rank}]: {line}\n" for line in text.rstrip("\n").split("\n")).encode(
        errors="replace"
    )
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    while block:
        try:
            written = os.write(2, block)
        except InterruptedError:
            continue
        except OSError:
            return
        block = block[written:]


def report_uncaught(err: BaseException, settings: Settings) -> None:
    """What the interpreter does with an uncaught exception, for a worker running the script itself.

    The agent's error file names the cause (unless a peer's failure caused this one), whoever
    installed the hook: torch's ``init_process_group`` installs its ``[rankN]`` hook in every
    process that forms a group, and that hook writes no error file.  Then a hook the script,
    torch or `distrain.init()` installed prints it; otherwise (a plain script before its group)
    the traceback is printed once as a block.
    """
    mark_failing()
    peer = is_peer_failure(err)
    error_file = settings.error_file
    if error_file and not peer:
        with contextlib.suppress(OSError):
            write_error_file(error_file, err, err.__traceback__, settings)
    if sys.excepthook is not sys.__excepthook__:
        sys.excepthook(type(err), err, err.__traceback__)
        return
    rank = settings.agent_rank or "?"
    if peer:
        _log.error(f"distrain: rank {rank} stopped: another rank failed ({peer_cause(err)})")
        return
    print_traceback_block(rank, err)


def install(rank: int, settings: Settings) -> None:
    """Install the excepthook: one line for distrain's errors; root cause once (torchelastic)."""
    error_file = settings.error_file

    def hook(
        kind: type[BaseException],
        err: BaseException,
        tb: TracebackType | None,
        previous: patching.ExceptHook,
    ) -> None:
        mark_failing()
        # the process is going down: the agent's SIGTERM must end it, not ask for a checkpoint
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_DFL)
        if isinstance(err, DistrainError) and err.recurs:
            # every restart would fail the same way: no node restarts (lifecycle/stop_job.py); the
            # error file is written first, so the agent still names this rank's cause
            if error_file:
                with contextlib.suppress(OSError):
                    write_error_file(error_file, err, tb, settings)
            stop_the_job(f"rank {rank}: {type(err).__name__}: {err}", settings)

        if isinstance(err, DistrainError) and err.one_line:  # a set-up problem: one clear line
            if error_file:
                write_error_file(error_file, err, tb, settings)
            _log.error(f"distrain: error: {err}")
            return
        plain = previous is sys.__excepthook__
        if not error_file:
            if plain:
                print_traceback_block(rank, err.with_traceback(tb))
            else:
                previous(kind, err, tb)
            return
        if is_peer_failure(err):
            _log.error(f"distrain: rank {rank} stopped: another rank failed ({peer_cause(err)})")
            sys.stdout.flush()
            # nothing left to save or sync with; skip a teardown that can block on the dead peer
            os._exit(1)
        try:
            write_error_file(error_file, err, tb, settings)
        except OSError:
            pass
        if plain:
            print_traceback_block(
                rank, err.with_traceback(tb), header=f"distrain: rank {rank} failed (root cause):\n"
            )
        else:
            _log.error(f"distrain: rank {rank} failed (root cause):")
            previous(kind, err, tb)

    patching.on_uncaught("failure", hook)
