"""torch's and TorchFT's known noise: the one list of lines distrain keeps off the console.

A new user's console should say what happened and nothing else.  torch and TorchFT print lines
that are expected in a distrain job and say nothing the user can act on: the agent's report of a
worker it is about to restart (``failed (exitcode: -9) … (start_method: forkserver)``), its
``Terminating process … via signal SIGTERM`` for the survivors it stops on purpose, TorchFT's
traceback of the gloo error that *is* the heal it is about to do, a deprecation inside TorchFT's
own process groups.  distrain says what happened in its own lines instead (a restart: launch/
console.py; a lost and healed replica group: launch/replicas/events.py).

Everything here is matched exactly (logger name and message start, warning text and category),
so an unknown line is never hidden.  ``DISTRAIN_LOG_LEVEL=debug`` turns every filter off (and
lowers these loggers to INFO, so torch's agent's own INFO lines show too): nothing is lost at
debug.
"""

from __future__ import annotations

import logging
import re
import warnings

from distrain.settings import debug_logging

#: Python warnings distrain's own use of torch and TorchFT causes: (message start, category, why)
KNOWN_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    (
        "The given buffer is not writable",
        UserWarning,
        "TorchFT's PGTransport reads a received checkpoint with torch.frombuffer (a heal)",
    ),
    (
        "torch.distributed is disabled, unavailable or uninitialized",
        UserWarning,
        "DCP on one process without a group: distrain's own single-process checkpoints",
    ),
)

#: log records by logger name: the message starts that are known noise
KNOWN_RECORDS: dict[str, tuple[str, ...]] = {
    # the agent stops the survivors of a failed worker on purpose (fork server path)
    "torch.multiprocessing.spawn": ("Terminating process",),
    # the agent's report of a failed worker and of the survivors it stops (both start methods):
    # `distrain run` names the rank, its cause and the restart in its own line
    "torch.distributed.elastic.multiprocessing.api": (
        "failed (exitcode",
        "Closing process",
        "Sending process",
    ),
    # the agent passing a stop on to its workers: `distrain run` says the stop in its own line
    # ("stopped by SIGTERM …", or the job's end on every host); its message starts with the
    # signal's number, so it is matched by KNOWN_PATTERNS below
    # TorchFT's manager (after its ``[replica/rank - step N]`` prefix), when a peer group died
    # mid-step: the gloo error is the loss `distrain run: replica group G lost at step N`
    # reports, and the step is not committed
    "torchft.manager": (
        "got exception waiting for work",
        "got exception in all reduce",
        "got exception in future",
    ),
}
#: log records by logger name: whole messages that are known noise, where a number leads them
KNOWN_PATTERNS: dict[str, tuple[str, ...]] = {
    "torch.distributed.elastic.agent.server.api": (
        r"Received (\d+|Signals\.SIG[A-Z]+|SIG[A-Z]+) death signal, shutting down workers",
    ),
}
#: loggers whose messages start with a ``[…] `` prefix before the text matched above
_PREFIXED = ("torchft.manager",)

#: lines torch's C++ side writes straight to stderr (no Python logger or warning to filter):
#: matched in a window around the one place each is known to come from (worker/replicas/noise.py)
KNOWN_CPP: tuple[str, ...] = (
    # distrain's --replicas DDP keeps its buckets as first built (find_unused_parameters=True,
    # worker/replicas/training.py): the warning that no parameter was unused is the expected case
    # there
    "find_unused_parameters=True was specified in DDP constructor, but did not find any unused",
    # TorchFT's process groups call a deprecated no-op at every reconfiguration
    "setSequenceNumberForGroup() is deprecated",
    # c10d's TCPStore names a connecting client by reverse DNS, and warns when that fails (hosts
    # without DNS, 4× per multi-host job): nothing fails, the peer is named by its address.
    # Dropped from the hosts' output by `distrain run --hosts` (launch/hosts/run.py)
    "[c10d] The hostname of the client socket cannot be retrieved",
)


def known_cpp(line: str) -> bool:
    """Whether a line torch's C++ side wrote to stderr is one of :data:`KNOWN_CPP`."""
    return any(k in line for k in KNOWN_CPP)


def verbose() -> bool:
    """Whether ``DISTRAIN_LOG_LEVEL=debug`` asks for every line, unfiltered."""
    return debug_logging()


def known(name: str, message: str) -> bool:
    """Whether a record of logger `name` with text `message` is known noise."""
    if name in _PREFIXED and message.startswith("[") and "] " in message:
        message = message.split("] ", 1)[1]
    if any(re.fullmatch(p, message) for p in KNOWN_PATTERNS.get(name, ())):
        return True
    return message.startswith(KNOWN_RECORDS.get(name, ()))


class KnownNoise(logging.Filter):
    """Drops the records of :data:`KNOWN_RECORDS` (nothing at ``DISTRAIN_LOG_LEVEL=debug``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if verbose():
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        return not known(record.name, message)


_installed: set[str] = set()


def quiet_loggers(names: tuple[str, ...] | None = None) -> None:
    """Put :class:`KnownNoise` on the loggers of :data:`KNOWN_RECORDS` (each once per process).

    At ``DISTRAIN_LOG_LEVEL=debug`` torch's distributed loggers and TorchFT's show INFO as well.
    """
    for name in names if names is not None else (*KNOWN_RECORDS, *KNOWN_PATTERNS):
        if name in _installed:
            continue
        _installed.add(name)
        logger = logging.getLogger(name)
        logger.addFilter(KnownNoise())
        if verbose():
            logger.setLevel(logging.INFO)


def quiet_warnings() -> None:
    """Register the filters of :data:`KNOWN_WARNINGS` (none at ``DISTRAIN_LOG_LEVEL=debug``)."""
    if verbose():
        return
    for start, category, _why in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=_escaped(start), category=category)


def _escaped(start: str) -> str:
    return re.escape(start)


def install() -> None:
    """Every filter of this module, for this process (idempotent)."""
    quiet_warnings()
    quiet_loggers()
