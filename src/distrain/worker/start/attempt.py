"""Which attempt of the job this worker group is: one number every rank on every node agrees on.

The job's store may outlive an attempt: torch's static rendezvous and torchrun's shared c10d
store keep one TCPStore across restarts, so each attempt needs its own key prefix.  The
agent's TORCHELASTIC_RESTART_COUNT cannot name it across nodes: under c10d, when one worker of
one node fails, that node's agent counts a restart while the other nodes' agents only see a
membership change and keep their count, and the ranks then wait for peers under another
prefix until the init timeout.  So rank 0 draws the attempt from a counter in the store and
answers every other rank's request for it:

- rank 0: ``attempt = add(next, 1) - 1``; a thread on its own store client answers requests;
- rank r: append ``"r nonce"`` to a request log, read the reply under its own nonce, count
  itself in the attempt's acknowledgements (rank 0's thread stops once all ranks did).

A nonce is fresh per process, so a reply left from an earlier attempt is never read again;
requests of dead processes are answered too, harmlessly.  Rank 0 starts reading the log where
the previous attempt's rank 0 stopped, so the log is read once over the whole job.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

import torch.distributed as dist

from distrain.errors import DistrainError

_NS = "distrain/attempts"


def attempt_prefix(attempt: int) -> str:
    """The store prefix of one attempt (the watchdog's client and the process group share it)."""
    return f"distrain/attempt_{attempt}"


def agree_attempt(
    store: dist.Store,
    rank: int,
    world: int,
    timeout: dt.timedelta,
    connect: Callable[[], dist.Store],
) -> int:
    """This attempt's number (0, 1, …), the same on every rank; `connect` opens another client."""
    if rank == 0:
        attempt = int(store.add(f"{_NS}/next", 1)) - 1
        if world > 1:
            answer = _Answerer(connect, attempt, world, timeout.total_seconds())
            threading.Thread(target=answer.run, name="distrain-attempt", daemon=True).start()
        return attempt
    nonce = f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:12]}"
    index = int(store.add(f"{_NS}/asked", 1))
    store.set(f"{_NS}/ask/{index}", f"{rank} {nonce}")
    try:
        attempt = int(store.get(f"{_NS}/reply/{nonce}"))
    except dist.DistStoreError:
        raise DistrainError(
            f"rank {rank}: rank 0 did not say which attempt this is within "
            f"{timeout.total_seconds():g} s (is rank 0 running?)"
        ) from None
    store.add(f"{_NS}/{attempt}/acks", 1)
    return attempt


class _Answerer:
    """Rank 0's side: reply to each request in the log until every other rank acknowledged."""

    def __init__(
        self, connect: Callable[[], dist.Store], attempt: int, world: int, seconds: float
    ) -> None:
        self.connect, self.attempt, self.world, self.seconds = connect, attempt, world, seconds

    def run(self) -> None:
        """Answer until all acknowledged or the init timeout passed (the ranks then fail on it)."""
        deadline = time.monotonic() + self.seconds
        try:
            # its own client: the main thread's client is busy in blocking waits while the group
            # forms (TCPStore serializes a client's operations), and those wait for our replies
            store = self.connect()
            done, read = f"{_NS}/{self.attempt}/acks", f"{_NS}/read"
            seen = int(store.get(read)) if store.check([read]) else 0
            pending: list[int] = []
            written, pause = seen, 0.002
            while time.monotonic() < deadline and int(store.add(done, 0)) < self.world - 1:
                asked = int(store.add(f"{_NS}/asked", 0))
                pause = 0.002 if asked > seen else min(0.05, pause * 2)
                pending += range(seen + 1, asked + 1)
                seen = max(seen, asked)
                # a request counted but not written yet stays pending (its writer is just behind)
                pending = [i for i in pending if not self._reply(store, i)]
                if not pending and seen != written:  # the next attempt's rank 0 starts there
                    store.set(read, str(seen))
                    written = seen
                time.sleep(pause)
        except Exception:  # the store went away: the job is ending, or the ranks report it
            return

    def _reply(self, store: dist.Store, index: int) -> bool:
        key = f"{_NS}/ask/{index}"
        if not store.check([key]):
            return False
        _, nonce = store.get(key).decode().split(" ", 1)
        store.set(f"{_NS}/reply/{nonce}", str(self.attempt))
        return True
