"""Stopping a static job once, whichever of its ranks and node launchers stops it first.

A rank that stops the job (worker/lifecycle/stop_job.py) and a node launcher's stop watch
(launch/nodes/stop_watch.py) both claim :data:`STOP_MARK`; only the process that made it signals the
launcher.  Why it stopped is a ``stop`` event, or a key in the store for the other nodes.
"""

from __future__ import annotations

import os

#: made in DISTRAIN_JOB_DIR by the first rank (or node launcher) that stops a static job.  A claim,
#: not a report: it holds nothing, and only the process that made it signals the launcher, once
#: (why goes to the job's event stream, a ``stop`` event, or stays in the launcher's own watch)
STOP_MARK = "stopped.txt"

#: in a static multi-node job's agent store (DISTRAIN_STATIC_STORE): why a rank stopped the job;
#: ``…/read/N``: node N's launcher read it, ``…/alive/N``: node N's launcher still watches
JOB_STOPPED_KEY = "distrain/job-stopped"


def gone_key(node: int) -> str:
    """Where node 0's launcher says that node `node`'s launcher ended (launch/nodes/peer_gone.py):
    a restarted rank waiting for that node's ranks stops at once (worker/start/store.py)."""
    return f"{JOB_STOPPED_KEY}/gone/{node}"


def claim_stop(folder: str | None) -> bool:
    """Make :data:`STOP_MARK` in `folder` unless it is there already; True when this call made it
    (the caller then signals the launcher: once, however many ranks stop it)."""
    if not folder:
        return True
    try:
        os.close(os.open(os.path.join(folder, STOP_MARK), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:  # the launcher's folder is gone (it is exiting): signal it anyway
        return True
    return True


def stop_key(run_id: str) -> str:
    """Where, in the rendezvous store, a rank leaves why it stopped the job (launchers read it)."""
    return f"distrain/stopped/{run_id}"
