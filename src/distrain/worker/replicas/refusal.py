"""Under `distrain run --replicas`: a process the groups cannot replicate stops in one line.

A script that nothing joins to the replica API (no ``distrain.init()``, an optimizer over a
model not given to ``ctx.prepare_model``: optimizers.py finds those at their first step) would
train as independent copies; one whose own DistributedSampler splits the data over the ranks of
its group only would have every group train on the same samples.  Both ran to the end and
passed.  Each is refused instead: the reason goes to the launcher as a ``refused`` replica event
(it prints the one line, stops every group and exits with
:data:`~distrain.contract.REFUSED_EXIT_CODE`: a restart would refuse again) and to the agent's
error file.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from distrain.contract import REFUSED_EXIT_CODE
from distrain.events import emit
from distrain.process import patching
from distrain.settings import for_report

FEATURE = "replicas"


def refuse(why: str, outcome: str = "nothing would be replicated across the groups") -> NoReturn:
    """Stop this process: `why` (what it did), so `outcome`; one line, the launcher's."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "the script"
    line = (
        f"{script} cannot run under --replicas: {why}, so {outcome}; --replicas needs "
        "distrain.init() and ctx.prepare_model(model) (docs/fault_tolerance.md); for plain data "
        "parallel use `distrain run -n N`"
    )
    settings = for_report()
    folder, group, rank = settings.ft_events, settings.replica_group, settings.agent_rank or ""
    said = False
    if folder and group is not None:  # the launcher says it and stops the job
        said = emit(
            "replica",
            folder,
            event="refused",
            group=group,
            rank=int(rank) if rank.isdigit() else 0,
            reason=line,
        )
    _leave_cause(line)
    if not said:  # no launcher to say it: this process does
        print(f"distrain run: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(REFUSED_EXIT_CODE)


def check_samplers(joined: Callable[[], bool]) -> None:
    """Refuse a DistributedSampler made over fewer processes than the replica groups hold."""

    def make(original: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            settings = for_report()
            world = settings.agent_world_size or ""
            groups = settings.replica_groups or 1
            job = groups * (int(world) if world.isdigit() else 1)
            if groups > 1 and self.num_replicas < job:
                made = "made" if joined() else "made, without calling distrain.init(),"
                refuse(
                    f"this process {made} a DistributedSampler over {self.num_replicas} "
                    f"process(es), not the {job} of the {groups} groups",
                    "every group would train on the same samples (ctx.prepare_loader splits "
                    "the data over groups × ranks)",
                )

        return __init__

    from torch.utils.data.distributed import DistributedSampler

    patching.wrap(DistributedSampler, "__init__", make, feature=FEATURE)


def _leave_cause(line: str) -> None:
    # the agent's error file: the group's own launcher names the cause, not "exit code 3"
    from distrain.settings import for_report
    from distrain.worker.lifecycle.failure import mark_failing, write_error_message

    mark_failing()
    settings = for_report()
    if settings.error_file and not os.path.exists(settings.error_file):
        with contextlib.suppress(OSError):
            write_error_message(settings.error_file, line, "", settings)


def check_batch_from_world_size(groups: int) -> None:
    """Refuse a loader whose batch_size the script computed from ``world_size``.

    Under `--replicas` ``ctx.world_size`` is one group's size, while ``ctx.prepare_loader``
    splits each step's data over groups × ranks: ``GLOBAL // ctx.world_size`` would train a
    global batch `groups` times larger than the script means, and end unlike its torchrun run.
    Read from the calling line's source (and one assignment back, for a name): a heuristic that
    sees the idiom as tutorials write it; a batch computed further away is not seen.
    """
    if groups < 2:
        return
    frame: Any = sys._getframe(1)
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
    if frame is None or not os.path.isfile(frame.f_code.co_filename):
        return
    from distrain.worker.replicas.batch_source import batch_mentions_world_size

    where = batch_mentions_world_size(frame.f_code.co_filename, frame.f_lineno)
    if where:
        refuse(
            f"its batch_size comes from world_size ({where}), which is one group's size",
            f"the {groups} groups would train a global batch {groups}× the one it means "
            "(write a per-process batch_size: the global batch is batch_size × ranks × groups)",
        )
