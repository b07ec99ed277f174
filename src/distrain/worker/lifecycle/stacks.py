"""``kill -USR1 <pid>`` of a worker prints every thread's Python stack and the worker goes on.

The stdlib's :func:`faulthandler.register` does it from a C signal handler: the dump comes even
when the main thread is blocked inside a collective (a Python-level handler would wait for the
next bytecode, possibly forever).  The stacks go to the worker's stderr (file descriptor 2), which
torchrun's agent redirects where the rest of the worker's output goes.

Installed by ``distrain run``'s forked workers before the script runs (so a script that never
calls ``distrain.init()`` has it too) and by :func:`distrain.init` (torchrun, SLURM, mpirun, …).
A handler the script installed first still runs after the dump (``chain``); one it installs
later replaces the dump, as does the stop signal of :mod:`distrain.process.signals` under SLURM.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

#: the signal that asks a worker for its stacks (absent on Windows)
DUMP_SIGNAL = getattr(signal, "SIGUSR1", None)


def dump_stacks_on_signal() -> bool:
    """Make SIGUSR1 dump all threads' stacks to stderr instead of ending the process.

    Returns False where it does not: no SIGUSR1, a stderr without a file descriptor, or SIGUSR1
    ignored.  Calling it again installs the dump again where ``SIG_DFL`` replaced it.
    """
    if DUMP_SIGNAL is None:
        return False
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stderr replaced by an in-memory stream
        return False
    previous = signal.getsignal(DUMP_SIGNAL)
    if previous == signal.SIG_IGN:  # whoever ignores it chose so (distrain's fork server
        return False  # does, and its workers restore the default before calling this)
    if previous == signal.SIG_DFL:
        # faulthandler reinstalls nothing for a signal it registered before, even when
        # signal.signal(SIGUSR1, SIG_DFL) has since replaced its handler: start over
        faulthandler.unregister(DUMP_SIGNAL)
    # chaining to the default action would end the process; a Python handler (or one set from
    # C, None) runs after the dump, as its owner expects
    chain = previous != signal.SIG_DFL
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=chain)
    return True
