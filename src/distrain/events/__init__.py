"""The one channel from the workers back to `distrain run` (the stream: :mod:`.stream`).

Workers call :func:`emit`; the launcher (and `distrain top`) read with :func:`read_events`.
Imports no torch: both sides use it.
"""

from __future__ import annotations

from distrain.events.stream import (
    FILE,
    KINDS,
    REPLICA_EVENTS_FILE,
    emit,
    identity,
    job_events,
    read_events,
    stream,
)

__all__ = [
    "FILE",
    "KINDS",
    "REPLICA_EVENTS_FILE",
    "emit",
    "identity",
    "job_events",
    "read_events",
    "stream",
]
