"""The fan-out's last line for a failed job: the cause once, from the host that had it.

Each host's `distrain run` ends a failed job with its own ``distrain run: job failed: …`` line:
the host whose rank raised names the cause; the others name their own rank, stopped because its
peer went away, and the host holding the checkpoint adds the resume hint.  Printed as they come
and then wrapped by the fan-out's own line (``job failed: host h0: exited with code 1: distrain
run: job failed: rank 0 … exited with code 1; rerun …``), the cause was nested, given for the
wrong host, and the hint was not on the last line.  Here the hosts' verdicts are held back
(``DISTRAIN_LOG_LEVEL=debug`` shows them) and folded into one line: the host that printed the
root cause (``rank N failed (root cause)``) and its verdict, then the first resume hint any host
gave.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, TypeVar

#: how a node's `distrain run` starts its verdict on a failed job (launch/cli.py)
NODE_VERDICT = "distrain run: job failed: "
#: what a rank's excepthook prints before the root cause's traceback (worker/lifecycle/failure.py)
ROOT_CAUSE = re.compile(r"^distrain: rank \d+ failed \(root cause\)")
#: the resume hint at the end of a node's verdict (launch/report/console.py)
_HINT = re.compile(r"; rerun .*$")


class HostEnd(Protocol):
    """What a host's session knows at its end (launch/hosts/run.Session)."""

    name: str
    #: its node's own verdict, without NODE_VERDICT; None when it printed none
    verdict: str | None
    #: whether one of its ranks printed the root cause
    root_cause: bool

    def reason(self) -> str:
        """Why the session ended, in a few words."""
        ...


S = TypeVar("S", bound=HostEnd)


def blamed(sessions: Sequence[S], first: S) -> S:
    """The host to name: the one whose rank had the root cause, else `first` (the first seen to
    fail)."""
    return next((s for s in sessions if s.root_cause), first)


def failed_line(sessions: Sequence[HostEnd], first: HostEnd) -> str:
    """``job failed: host h1: rank 1 (pid 9749) exited with code 1: ValueError: …; rerun the
    same command to resume from step 8 (…)``."""
    host = blamed(sessions, first)
    cause = host.verdict if host.verdict is not None else host.reason()
    hints = [m.group(0) for s in sessions if s.verdict and (m := _HINT.search(s.verdict))]
    if hints and not _HINT.search(cause):
        cause += hints[0]
    return f"job failed: host {host.name}: {cause}"
