"""A heal inside a step moves the loader of the script's running loop (TorchFT's later quorums).

TorchFT heals a group behind at a quorum, and after the first one a quorum is taken at a step's
first forward: the script's ``for batch in loader:`` has begun and holds the step's batch, drawn
at the group's own position.  A copy that left that loader where it was trained the group on other
batches than its source from then on, and only the job's end check said so (``replica groups
ended with different states``).  The source sends its loader's position at the start of the step
(``Replicas._state``): that becomes the start of this group's step, the batch in hand stands for
the source's, and the loop's iterator goes on at the source's next batch (data/sampler.py
``DistributedLoader.continue_from``, which drops what its workers prefetched).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from distrain.data.sampler import DistributedLoader
from distrain.errors import DistrainError
from distrain.log import get_logger

_log = get_logger("train")


def move_loader(
    where: tuple[int, int | None],
    positions: dict[str, Any],
    name: str,
    loader: DataLoader,
    sent: Any,
) -> None:
    """Move `loader` (registered as `name`), in a step of group ``where[0]`` healed from group
    ``where[1]``, to `sent`, the source's step start; `positions` holds each loader's step start.

    A loader that is not one of ``ctx.prepare_loader``'s cannot move under a running loop: unless
    it is at the source's position already, the group stops with one line (and restarts, healing
    before its loop) rather than train on other batches.
    """
    group, source = where
    own = positions.get(name)
    if own == sent:  # groups that consumed their batches together: nothing to move
        return
    if not isinstance(loader, DistributedLoader):
        raise DistrainError(
            f"replica group {group} healed from group {source} inside a step, and its loader "
            f"{name!r} (not one of ctx.prepare_loader's) cannot move from {own} to {sent} under a "
            "running loop: the group restarts rather than train on other batches"
        )
    loader.continue_from(sent)
    positions[name] = sent  # what a copier of this step gets: its start
    _log.info(
        f"distrain: replica group {group} healed inside a step: loader {name!r} moved from "
        f"{own} to group {source}'s {sent}"
    )
