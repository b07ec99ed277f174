"""The agent's error file, written through torch's own :class:`ErrorHandler`.

Torch's elastic agent (torchrun, ``distrain run``) names a failed job's root cause from the JSON a
worker leaves in its ``TORCHELASTIC_ERROR_FILE``, which ``@record`` writes with
``ErrorHandler.record_exception``.  A distrain worker writes it through :class:`RootCause`, that
class as torch invites it to be subclassed (``record_exception`` overridden), for what a worker's
uncaught exception needs:

- the traceback is the exception's own: the base reads ``traceback.format_exc()``, which is
  empty in an excepthook (no exception is being handled there; ``@record`` calls it inside its
  ``except``);
- a self-started child's failure re-raised by ``mp.spawn`` names the child's own line
  (:func:`cause_line`), not ``ProcessRaisedException``'s empty first line;
- a cause known only as text (a fresh interpreter's last line on stderr, a refusal, a watch's
  verdict) goes into the same JSON (:meth:`RootCause.record_cause`).

This module imports torch: worker/lifecycle/failure.py uses it only in a process that already
did (importing torch at a torch-free script's exit fails: "can't register atexit after
shutdown").
"""

from __future__ import annotations

import json
import sys
import time
import traceback

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler


def cause_line(err: BaseException) -> str:
    """``Type: message``; for a self-started child's failure re-raised by ``mp.spawn``, the child's.

    ``ProcessRaisedException`` carries the child's whole traceback as its message (its first
    line is empty): the child's own exception line, its last, is the cause.
    """
    # only a process that imported torch's spawn raises its exception: not imported here
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    raised = getattr(spawn, "ProcessRaisedException", None)
    if isinstance(raised, type) and isinstance(err, raised):
        lines = [line for line in str(err).splitlines() if line.strip()]
        if lines:
            return lines[-1].strip()
    return f"{type(err).__name__}: {err}"


class RootCause(ErrorHandler):
    """Torch's ErrorHandler for the error file at `path`, with the exception's own traceback."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _get_error_file_path(self) -> str | None:
        return self.path

    def record_exception(self, e: BaseException) -> None:
        """Record `e` (being handled or not) as the root cause: its line and its traceback."""
        callstack = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        self.record_cause(cause_line(e), callstack)

    def record_cause(self, message: str, callstack: str) -> None:
        """Record a cause known by its line, in the JSON of ``record_exception``."""
        data = {
            "message": {
                "message": message,
                "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time()))},
            }
        }
        self._write_error_file(self.path, json.dumps(data))
