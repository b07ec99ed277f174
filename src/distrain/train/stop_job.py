"""A failure that every restart would repeat: stop the whole job instead of restarting it.

torch's elastic agent restarts a failed worker group whatever the failure, until
``--max-restarts`` runs out: a checkpoint that does not fit the job (``saved global batch 64 !=
current 128``) was refused again on every attempt.  A rank whose error recurs
(``DistrainError.recurs``) closes the job's c10d rendezvous before it exits, through torch's
public ``RendezvousHandler.set_closed()``: the agent of every node then finds the rendezvous
closed at its next round and ends, and no attempt starts again.  The reason is left in the
rendezvous store, where `distrain run` reads it for its last line on every node.

Only under `distrain run` with a c10d rendezvous (it passes the endpoint, DISTRAIN_RDZV_ENDPOINT):
a static rendezvous has nothing to close.  There :func:`stop_this_node` stops the node's own
`distrain run` instead (a restarted attempt whose peers never came back, runtime/rejoin.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal

from ..contract import LAUNCHER_PID, RDZV_ENDPOINT, STOP_MARK, SUMMARY_DIR, split_endpoint, stop_key
from ..log import get_logger

_log = get_logger("failure")

#: bound on reaching the rendezvous store (it is up: this rank's agent rendezvoused through it)
STORE_TIMEOUT_S = 10.0


def stop_the_job(reason: str) -> bool:
    """Close this job's rendezvous so no node restarts it; False when there is none to close."""
    endpoint, run_id = os.environ.get(RDZV_ENDPOINT), os.environ.get("TORCHELASTIC_RUN_ID")
    if not endpoint or not run_id:
        return False
    try:
        import torch.distributed as dist
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
            C10dRendezvousBackend,
        )
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

        host, port = split_endpoint(endpoint)
        timeout = dt.timedelta(seconds=STORE_TIMEOUT_S)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
        store.set(stop_key(run_id), reason)
        backend = C10dRendezvousBackend(store, run_id)
        DynamicRendezvousHandler.from_backend(run_id, store, backend, 1, 1).set_closed()
        return True
    except Exception as err:  # the job then restarts as before; say why it could not stop
        _log.warning(f"distrain: could not stop the job's rendezvous ({type(err).__name__}: {err})")
        return False


def stop_this_node(reason: str) -> bool:
    """Stop this node's `distrain run` so its agent restarts nothing; False when there is none.

    A static rendezvous has no shared state to close.  The reason goes to the launcher's
    summary folder (its last line says it), then the launcher gets SIGTERM: torch's agent stops
    its workers and ends, as on a user's SIGTERM.  Only an ancestor of this process is signalled.
    """
    pid, folder = os.environ.get(LAUNCHER_PID, ""), os.environ.get(SUMMARY_DIR)
    if not pid.isdigit():
        return False
    import psutil

    try:
        if int(pid) not in {p.pid for p in psutil.Process().parents()}:
            return False
        if folder:
            with contextlib.suppress(OSError), open(os.path.join(folder, STOP_MARK), "w") as f:
                f.write(reason)
        os.kill(int(pid), signal.SIGTERM)
        return True
    except (OSError, psutil.Error) as err:
        _log.warning(f"distrain: could not stop this node's launcher ({type(err).__name__}: {err})")
        return False
