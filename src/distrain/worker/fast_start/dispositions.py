"""A forked worker's signal dispositions, made those of a worker torchrun's agent would exec.

A fork copies every disposition of the fork server, which is a fork of `distrain run` from
before the agent started: whatever the launcher ignored (a background job of a shell script
ignores SIGINT and SIGQUIT, ``nohup`` SIGHUP) and the server's own choices. A torchrun worker
is exec'd by the agent instead, and (measured, torch 2.14, tests/jobs/test_fidelity_probe.py):

- exec resets every handled signal to ``SIG_DFL`` and keeps ``SIG_IGN``;
- the agent handles ``TORCHELASTIC_SIGNALS_TO_HANDLE`` (SIGTERM, SIGINT, SIGHUP, SIGQUIT) while
  workers run, so those reach the worker as ``SIG_DFL`` even where the launcher ignored them;
- the new interpreter ignores SIGPIPE and SIGXFSZ, and turns SIGINT into ``KeyboardInterrupt``
  (``default_int_handler``) unless it inherited SIGINT ignored.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterable
from typing import Any

#: what a fresh interpreter ignores itself at start (Python's signal module initialisation)
PYTHON_IGNORES = frozenset(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)
)
#: what torch's agent handles when TORCHELASTIC_SIGNALS_TO_HANDLE is unset
AGENT_DEFAULT = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def agent_handles(names: str) -> frozenset[int]:
    """The signals a ``TORCHELASTIC_SIGNALS_TO_HANDLE`` value names (unknown names skipped)."""
    found = set()
    for name in (names or AGENT_DEFAULT).split(","):
        sig = getattr(signal, name.strip(), None)
        if isinstance(sig, signal.Signals):
            found.add(int(sig))
    return frozenset(found)


def exec_dispositions(launcher_ignores: Iterable[int], handled: Iterable[int]) -> dict[int, Any]:
    """Every named signal's disposition in a Python worker the agent would exec.

    `launcher_ignores`: the signals `distrain run` ignored when the job started; `handled`: the
    ones torch's agent installs a handler for (exec turns those back to ``SIG_DFL``).
    """
    kept = set(launcher_ignores) - set(handled)
    wanted: dict[int, Any] = {}
    for sig in signal.Signals:
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        wanted[int(sig)] = (
            signal.SIG_IGN if sig in kept or sig in PYTHON_IGNORES else signal.SIG_DFL
        )
    if wanted.get(signal.SIGINT) == signal.SIG_DFL:
        wanted[signal.SIGINT] = signal.default_int_handler
    return wanted


def reset_as_exec(launcher_ignores: Iterable[int], agent_signals: str) -> None:
    """Give this (forked, main-thread) process the dispositions an exec'd worker would have.

    A disposition set from C (``getsignal`` answers None) is left alone: it belongs to a
    library the server imported, which a fresh worker's import installs just the same.
    """
    for sig, want in exec_dispositions(launcher_ignores, agent_handles(agent_signals)).items():
        try:
            current = signal.getsignal(sig)
        except ValueError:
            continue
        if current is None or current == want:
            continue
        with contextlib.suppress(OSError, ValueError):  # a signal the platform will not change
            signal.signal(sig, want)


def fault_handler_as_fresh(asked: bool) -> None:
    """Disable faulthandler's fatal-signal dump unless a fresh interpreter would have it.

    `asked`: the worker's environment sets ``PYTHONFAULTHANDLER``.

    torch's wrapper of a *callable* worker entrypoint (its elastic error handler's
    ``initialize``) enables it; a torchrun worker running a script has it only when asked
    (``PYTHONFAULTHANDLER``, or the script's own ``faulthandler.enable()``).
    """
    import faulthandler

    if faulthandler.is_enabled() and not asked:
        faulthandler.disable()
