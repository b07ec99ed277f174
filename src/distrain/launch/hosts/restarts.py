"""One restart line for a job on many hosts, naming the host and rank that failed.

Each node's `distrain run` says a restart in its own line (launch/report/console.py): the node whose
rank failed names it (``local rank 0 (pid P) was killed by SIGKILL``), every other node names
its own rank, stopped because its peer went away (``local rank 0 … exited with code 1``), and
only rank 0's node knows the step the job resumes from.  The fan-out holds these lines back and
says one per attempt once every host has said it (or WINDOW_S after the first): the cause of the
host whose rank was killed or printed the root cause, else the first; the resume step from
whichever host gave it.  ``DISTRAIN_LOG_LEVEL=debug`` shows the hosts' own lines as well.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

#: a node's restart line (launch/report/console.py, its many-node wording)
LINE = re.compile(
    r"^distrain run: local rank (?P<rank>\d+) \(pid (?P<pid>\d+)\) (?P<what>.*?); restarting "
    r"this node's ranks \(attempt (?P<attempt>\d+) of (?P<total>\d+)\)(?P<resume>, resuming .*)?$"
)
#: how long after a host's restart line the others' are waited for
WINDOW_S = 5.0


class RestartLines:
    """Collects the hosts' restart lines; `say` gets one line per attempt."""

    def __init__(
        self, hosts: int, say: Callable[[str], None], first_rank: dict[str, int] | None = None
    ) -> None:
        self.hosts, self.say = hosts, say
        #: host → the global rank of its local rank 0, when every host's process count is known
        self.first_rank = first_rank or {}
        self._lock = threading.Lock()
        #: attempt → host → (its line's fields, whether that host had the root cause)
        self._seen: dict[int, dict[str, tuple[dict[str, str], bool]]] = {}
        self._said: set[int] = set()
        #: attempt → the timer that says it WINDOW_S after its first line (cancelled once whole)
        self._timers: dict[int, threading.Timer] = {}

    def take(self, host: str, line: str, root_cause: bool) -> bool:
        """True when `line` is a host's restart line (then said in the job's line, not as is)."""
        found = LINE.match(line)
        if found is None:
            return False
        attempt = int(found["attempt"])
        with self._lock:
            seen = self._seen.setdefault(attempt, {})
            first = not seen
            seen[host] = (found.groupdict(), root_cause or "killed by" in found["what"])
            complete = len(seen) >= self.hosts
            timer = self._timers.pop(attempt, None) if complete else None
        if timer is not None:  # every host spoke: the window's thread ends now, not WINDOW_S on
            timer.cancel()
            timer.join()
        if complete:
            self._say(attempt)
        elif first:
            timer = threading.Timer(WINDOW_S, self._say, args=(attempt,))
            timer.daemon = True
            with self._lock:
                self._timers[attempt] = timer
            timer.start()
        return True

    def _say(self, attempt: int) -> None:
        with self._lock:
            if attempt in self._said:
                return
            self._said.add(attempt)
            seen = dict(self._seen[attempt])
        host, (fields, _) = next(
            ((h, v) for h, v in seen.items() if v[1]), next(iter(seen.items()))
        )
        resume = next((f["resume"] for f, _ in seen.values() if f["resume"]), "") or ""
        local, pid = int(fields["rank"]), fields["pid"]
        who = f"local rank {local} of host {host} (pid {pid})"
        if host in self.first_rank:
            rank = self.first_rank[host] + local
            who = f"rank {rank} (host {host}, local rank {local}, pid {pid})"
        self.say(
            f"{who} {fields['what']}; "
            f"restarting every host's ranks (attempt {attempt} of {fields['total']}){resume}"
        )


def first_ranks(names: list[str], counts: list[int | None]) -> dict[str, int]:
    """host → the global rank of its local rank 0 (ranks follow the host order), or {} when a
    host's process count is decided on the host (its GPUs)."""
    if any(count is None for count in counts):
        return {}
    out, start = {}, 0
    for name, count in zip(names, counts, strict=True):
        out[name] = start
        start += count or 0
    return out
