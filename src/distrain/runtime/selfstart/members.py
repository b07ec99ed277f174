"""In each child of a self-starting script: note joining the group, forming it, and failing.

The notes are small files in ``DISTRAIN_FORM_DIR`` (the parent's watcher reads them):
``join-<pid>`` (rank and world size, when the child enters the rendezvous), ``formed-<pid>``
(init_process_group returned) and ``error-<pid>`` (the exception that ended the child).
The rendezvous is hooked through ``distributed_c10d.rendezvous``, which init_process_group
looks up at call time, so the join is seen however the script imported init_process_group;
"formed" needs init_process_group itself, so a join note says whether that hook is in place
(the watcher never times out a child whose forming it cannot see).
"""

from __future__ import annotations

import functools
import json
import multiprocessing.process
import os
from typing import Any

from ...contract import FORM_DIR
from .. import patching

FEATURE = "self_start"


def note(kind: str, **fields: Any) -> None:
    """Leave a note `kind` (join, formed, error) for this process in the form folder."""
    folder = os.environ.get(FORM_DIR)
    if not folder:
        return
    path = os.path.join(folder, f"{kind}-{os.getpid()}")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(fields, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # the folder is gone: the watcher has already ended the job


def hook_process_run() -> None:
    """Note the exception that ends a multiprocessing child (its traceback still prints); once."""

    def make(original: Any) -> Any:
        def run(self: multiprocessing.process.BaseProcess) -> None:
            try:
                original(self)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                note("error", message=f"{type(exc).__name__}: {exc}".strip())
                raise

        return run

    patching.wrap(multiprocessing.process.BaseProcess, "run", make, feature=FEATURE)


def hook_torch() -> None:
    """Note joining (rendezvous) and forming (init_process_group returned) in this process; once."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d

    def make(rendezvous: Any) -> Any:
        def hooked_rendezvous(url: str, rank: int = -1, world_size: int = -1, **kwargs: Any) -> Any:
            rank_seen = rank if rank >= 0 else int(os.environ.get("RANK", "-1"))
            size = world_size if world_size >= 0 else int(os.environ.get("WORLD_SIZE", "-1"))
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
