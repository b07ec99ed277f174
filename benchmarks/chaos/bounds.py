"""A trial's one bound, from docs/fault_tolerance.md's "Bounds" table and the measured reference.

    bound = the reference's slower run × (1 + the restarts the fault may cause) × LOAD
            + the documented waits the fault's stop or restart goes through
            + RERUN_S for each rerun's start (campaign.py adds it when it reruns)
            + the fault's own extra (a link down for 5 s: those 5 s; faults.Shot.bound_extra)

The reference is run twice per kind (campaign.py); its slower run is the base and the spread of
the two is printed with it.  A restart retrains at most from the newest checkpoint to the end, so
no longer than the reference; LOAD is the margin for a machine whose load moves between the
reference and the trial (the two references' spread is recorded in RESULTS.md).  The waits are
distrain's own settings, read from the code that documents them: a changed default moves the
bound.
"""

from __future__ import annotations

from distrain.launch.nodes import stop_watch
from distrain.settings import DEFAULT_FT_QUORUM_TIMEOUT_S, DEFAULT_REJOIN_TIMEOUT_S

#: margin for the machine's load moving between the reference run and the trial
LOAD = 1.5
#: the faults that look for their own moment (fault_save.catch_in_act, up to 30 s): a trial
#: starts them once its job is ready, not at a moment on the reference's clock, which a faster
#: trial can end before (the self-check beside the suite: "missed: the run had ended")
SELF_TIMED = ("kill_launcher_in_save", "kill_rank_in_snapshot")
#: a job's start again (a rerun, or the agent's restart: rendezvous, imports under load)
RERUN_S = 30.0
#: torch's agent gives a worker this long to obey its SIGTERM before SIGKILL (a stopped rank
#: cannot obey: docs "the job ended 43–45 s after it")
TORCH_TERM_GRACE_S = 30.0
#: the watchdog's verdict: S, then a poll, then 2 s for every rank's stacks (Bounds table)
STACKS_S = 2.0


def _watchdog(watchdog: float) -> float:
    """A frozen rank: single node, S + a poll + stacks + torch's grace to the stopped process;
    static two nodes, S + a poll + stacks + a look + 2 s + node 0's wait for the others to read
    why (READ_WAIT_S); the larger of the two."""
    single = watchdog + stop_watch.POLL_S + STACKS_S + TORCH_TERM_GRACE_S
    nodes = watchdog + 2 * stop_watch.POLL_S + 2 * STACKS_S + stop_watch.READ_WAIT_S
    return max(single, nodes)


#: a static node lost: the restarted attempt waits DISTRAIN_REJOIN_TIMEOUT, then every node reads
#: the reason (READ_WAIT_S)
REJOIN = DEFAULT_REJOIN_TIMEOUT_S + stop_watch.READ_WAIT_S
#: fault -> (restarts of the training it may cause, the documented waits in seconds); a rerun is a
#: restart too; a fault not listed: one restart, no wait
FAULT_COST: dict[str, tuple[int, float]] = {
    "kill_launcher": (1, RERUN_S),
    "kill_launcher_in_save": (1, RERUN_S),
    "corrupt_newest": (1, RERUN_S),
    "corrupt_memory": (1, RERUN_S),
    "memory_full": (3, RERUN_S),  # as disk_full: every restart refuses, then a rerun
    "sigterm_launcher": (1, TORCH_TERM_GRACE_S + REJOIN),
    "kill_node_launcher": (1, REJOIN),
    "lose_node_with_memory": (1, REJOIN),  # as kill_node_launcher: the survivor waits, then stops
    "kill_any_process": (2, REJOIN),
    "double_kill": (2, 0.0),
    "disk_full": (3, RERUN_S),  # every restart fails its save again: the agent's 3, then a rerun
    "kill_lighthouse": (1, DEFAULT_FT_QUORUM_TIMEOUT_S),
    "kill_lighthouse_in_heal": (2, DEFAULT_FT_QUORUM_TIMEOUT_S),
}


def bound(fault: str, reference_s: float, watchdog: float) -> float:
    """The seconds a trial of `fault` may take from its start, reruns' starts aside."""
    restarts, wait = FAULT_COST.get(fault, (1, 0.0))
    if fault in ("stop_rank", "stop_rank_resumed"):
        wait = _watchdog(watchdog)
    return reference_s * (1 + restarts) * LOAD + wait + RERUN_S
