"""In each child of a self-starting script: note joining the group, forming it, and failing.

The notes are ``group`` events in the job's stream (distrain/events/; the parent's watcher reads
them): ``join`` (rank and world size, when the child enters the rendezvous), ``formed``
(init_process_group returned) and ``error`` (the exception that ended the child).
The rendezvous is hooked through ``distributed_c10d.rendezvous``, which init_process_group
looks up at call time, so the join is seen however the script imported init_process_group;
"formed" needs init_process_group itself, so a join note says whether that hook is in place
(the watcher never times out a child whose forming it cannot see).

Each child also ends itself (SIGKILL) the moment the script's process is gone
(:func:`die_with_parent_process`): the launcher's chain holds by death signals, but the
script's own children are outside it.
"""

from __future__ import annotations

import functools
import multiprocessing.connection
import multiprocessing.process
import os
import signal
import threading
from typing import Any

from distrain.events import emit
from distrain.process import patching
from distrain.settings import for_report

FEATURE = "self_start"


def note(kind: str, **fields: Any) -> None:
    """Report `kind` (join, formed, error) of this process's group as a ``group`` event."""
    emit("group", state=kind, **fields)


def hook_process_run() -> None:
    """Note the exception that ends a multiprocessing child (its traceback still prints); once."""

    def make(original: Any) -> Any:
        def run(self: multiprocessing.process.BaseProcess) -> None:
            die_with_parent_process()
            try:
                original(self)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                note("error", message=f"{type(exc).__name__}: {exc}".strip())
                raise

        return run

    patching.wrap(multiprocessing.process.BaseProcess, "run", make, feature=FEATURE)


def die_with_parent_process() -> None:
    """In a child: SIGKILL this process as soon as its parent (the script's process) is gone.

    Why: a SIGKILLed `distrain run` takes its fork server and the script's process along (their
    death signals), but the script's children are its own.  ``mp.spawn``'s children ask for
    SIGINT at their parent's death, which does nothing where SIGINT is ignored (a job started
    in the background by a shell script) and otherwise starts an exit that took ~20 s under
    load; a ``Process`` loop's children ask for nothing.  Either way they trained on, holding
    multiprocessing's resource tracker too.  A death signal of our own (``PR_SET_PDEATHSIG``)
    would not do: torch's child sets its SIGINT after this hook runs (one signal per process),
    and it fires when the starting *thread* ends.  So a thread waits on multiprocessing's
    parent sentinel, the pipe whose other end only the parent holds while this child runs.
    """
    parent = multiprocessing.process.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    if sentinel is None:
        return
    fd = os.dup(sentinel)  # ours: whoever closes multiprocessing's copy cannot touch this one

    def watch() -> None:
        multiprocessing.connection.wait([fd])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="distrain-parent-watch", daemon=True).start()


def hook_torch() -> None:
    """Note joining (rendezvous) and forming (init_process_group returned) in this process; once."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d

    def make(rendezvous: Any) -> Any:
        def hooked_rendezvous(url: str, rank: int = -1, world_size: int = -1, **kwargs: Any) -> Any:
            agent = for_report()  # the agent's RANK and WORLD_SIZE when the call names none
            rank_seen = rank if rank >= 0 else int(agent.agent_rank or "-1")
            size = world_size if world_size >= 0 else int(agent.agent_world_size or "-1")
            watched = FEATURE in patching.hooked()["init_process_group"]
            note("join", rank=rank_seen, world_size=size, watched=watched)
            return rendezvous(url, rank, world_size, **kwargs)

        return hooked_rendezvous

    def failed(exc: BaseException) -> None:
        note("error", message=f"{type(exc).__name__}: {exc}".strip().splitlines()[0])

    patching.on_init_process_group(
        patching.GroupHook(FEATURE, after=functools.partial(note, "formed"), failed=failed)
    )
    hooked = patching.wrap(distributed_c10d, "rendezvous", make, feature=FEATURE).replacement
    patching.replace(dist, "rendezvous", hooked, feature=FEATURE, forwards=True)
