"""distrain's own messages from inside a training process: the ``distrain`` logger.

Every worker-side message (a checkpoint skipped, a peer that failed, a stop signal, the
watchdog's verdict) goes through ``logging.getLogger("distrain.<package>")``.  By default the
``distrain`` logger writes each one as the single line it always was (``distrain: checkpoint: …``)
to the stderr of the moment, level INFO and up, and does not propagate, so a root logger
configured by the script does not print it twice.  Command-line tools (``distrain run``,
``doctor``, ``bench``…) print their own output.

To silence or redirect it from a script that embeds distrain::

    import logging
    logging.getLogger("distrain").setLevel(logging.ERROR)     # only errors
    logging.getLogger("distrain").disabled = True             # nothing at all
    log = logging.getLogger("distrain")                       # into your own handlers:
    log.handlers.clear(); log.propagate = True

A handler the script adds to ``distrain`` before the first message replaces the default one.
``DISTRAIN_LOG_LEVEL=debug`` shows distrain's DEBUG lines too (and turns off the filters of
torch's and TorchFT's known noise: distrain/noise.py).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

from distrain import noise

ROOT = "distrain"


class _CurrentStderr(logging.StreamHandler):
    """A StreamHandler on whatever ``sys.stderr`` is when a record is written (a forked worker
    and pytest's capture replace it after import)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def get_logger(name: str) -> logging.Logger:
    """The logger ``distrain.<name>``; the ``distrain`` logger gets its default handler once."""
    root = logging.getLogger(ROOT)
    if not root.handlers and not getattr(root, "_distrain_default", False):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.DEBUG if noise.verbose() else logging.INFO)
        root.propagate = False
        root._distrain_default = True  # type: ignore[attr-defined]
    return logging.getLogger(f"{ROOT}.{name}")
