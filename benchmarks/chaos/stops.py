"""The stops each fault may end a run in, as docs/fault_tolerance.md tables them.

A run of a trial that exits non-zero must end in one of its fault's documented stops: the cause,
the exit codes it may have and a pattern its last line (distrain's own) must match.  Anything
else is an *undocumented stop*, bad even when the rerun heals: a resume that raises, a snapshot
left half-written, a collective error nobody named.  A fault with no stop listed here (a rank
killed, a link down) must heal without one: the agent restarts the ranks, the job goes on.
Two-node runs are judged by the exit and stderr of the node the campaign picked (the first node
the fault did not take away that failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Stop:
    """One documented way a run may end non-zero."""

    cause: str
    exits: tuple[int, ...]
    #: the last line's pattern; None: the process was killed and printed nothing of its end
    line: re.Pattern[str] | None
    #: the kinds it applies to (a name prefix: "nodes_static"); empty: every kind
    kinds: tuple[str, ...] = ()

    def fits(self, kind: str, rc: int, last_line: str) -> bool:
        """Whether a run of `kind` that exited `rc` with `last_line` is this stop."""
        if self.kinds and not kind.startswith(self.kinds):
            return False
        if rc not in self.exits:
            return False
        return self.line is None or bool(self.line.search(last_line))


#: the fault SIGKILLed this launcher itself: no line ("SIGKILL of `distrain run`"; Popen: -9)
KILLED = Stop("the fault SIGKILLed the launcher", (-9,), None)
#: "SIGTERM to `distrain run` (a preemption): a checkpoint at the end of the step, exit 143"
PREEMPTED = Stop("preempted: SIGTERM, a checkpoint, exit 143", (143,), re.compile(r"^distrain"))
#: "static --nnodes 2: node 1's launcher killed, or node 0's preempted … did not rejoin"
REJOIN = Stop("a static node did not rejoin (DISTRAIN_REJOIN_TIMEOUT)", (1,),
              re.compile(r"^distrain run: job stopped: .*did not rejoin attempt"),
              ("nodes_static",))  # fmt: skip
#: "static --nnodes 2: node 0's launcher killed: node 1 stops (DistNetworkError: Broken pipe)"
PEER_GONE = Stop("static: node 0's launcher gone, node 1 stops", (1,),
                 re.compile(r"^distrain run: .*(DistNetworkError|Broken pipe)"),
                 ("nodes_static",))  # fmt: skip
#: "--nnodes 1:2: node 0's launcher killed or preempted: node 1 stops (RendezvousConnectionError)"
STORE_GONE = Stop("elastic: node 0 (the c10d store) gone, node 1 stops", (1,),
                  re.compile(r"^distrain run: .*Rendezvous\w*Error"),
                  ("nodes_elastic",))  # fmt: skip
#: "static --nnodes 2: a rank frozen for good under --watchdog: every node's last line"
WATCHDOG = Stop("static: the watchdog named a frozen rank, every node stops", (1,),
                re.compile(r"^distrain run: job stopped: the watchdog: "),
                ("nodes_static",))  # fmt: skip
#: "SIGKILL of the lighthouse (--replicas): the job stops in one line"
LIGHTHOUSE = Stop(
    "the lighthouse ended, the groups stop",
    (1,),
    re.compile(r"^distrain run\S*: error: the TorchFT lighthouse .* ended"),
)
#: "checkpoint disk full during a save: the save fails on every rank (CheckpointError … Errno 28)"
DISK_FULL = Stop(
    "the checkpoint disk full during a save",
    (1,),
    re.compile(r"^distrain run: job failed: .*(CheckpointError|No space left)"),
)
#: docs/checkpointing.md "Memory tier": a restart whose tmpfs cannot hold the snapshots refuses
#: at start in one line (`memory snapshots need about … MiB in …`); the snapshot that found it
#: full failed first (`memory snapshot failed` / Errno 28)
MEMORY_FULL = Stop(
    "the memory tier's tmpfs full",
    (1,),
    re.compile(r"^distrain run: job failed\b.*(memory snapshots? (need|failed)|No space left)"),
)
#: kill_any_process may hit what no other fault does (the fork server, a group's launcher): the
#: agent names the process the fault SIGKILLed
SIGKILLED = Stop(
    "a process of the job SIGKILLed by the fault",
    (1, 137),
    re.compile(r"^distrain run\S*: .*(was killed by SIGKILL|exited with code -9)"),
)

NODE_LOSS = (REJOIN, PEER_GONE, STORE_GONE)
#: fault -> the stops its runs may end in (a fault not listed: none)
STOPS: dict[str, tuple[Stop, ...]] = {
    "kill_launcher": (KILLED,),
    "kill_launcher_in_save": (KILLED,),
    "corrupt_newest": (KILLED, *NODE_LOSS),
    "kill_node_launcher": (KILLED, *NODE_LOSS),
    "lose_node_with_memory": (KILLED, *NODE_LOSS),
    "sigterm_launcher": (PREEMPTED, *NODE_LOSS),
    "kill_lighthouse": (LIGHTHOUSE,),
    "kill_lighthouse_in_heal": (LIGHTHOUSE,),
    "disk_full": (DISK_FULL,),
    "memory_full": (MEMORY_FULL,),
    "corrupt_memory": (KILLED,),
    "stop_rank": (WATCHDOG,),
    "stop_rank_resumed": (WATCHDOG,),
    "kill_any_process": (LIGHTHOUSE, SIGKILLED, *NODE_LOSS),
}


def documented(fault: str, kind: str, rc: int, last_line: str) -> Stop | None:
    """The documented stop a run of `kind` under `fault` that exited `rc` ended in, or None."""
    return next((s for s in STOPS.get(fault, ()) if s.fits(kind, rc, last_line)), None)
