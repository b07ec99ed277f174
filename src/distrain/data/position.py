"""Where a resumed loader continues: the sample position in the epoch, across a world change.

A loader's state is a position in one epoch's permutation of the dataset (data/sampler.py): the
epoch and the samples of its permutation that finished steps consumed.  A position, unlike a
step number, means the same thing whatever the global batch: when an elastic job comes back on
another world size with a per-process ``batch_size``, its global batch changes (48 on 3
processes, 32 on 2), and the job goes on with the next sample of the same permutation.  No
sample of the epoch is skipped or seen twice across the change; only the tail that fills no
global batch at the epoch's end (fewer than one global batch) is dropped, as on any world.

Checkpoints written before the position was a sample count hold only ``step_in_epoch`` and the
global batch they were taken with: their position is the product of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Position:
    """A loader's place: the epoch, optimizer steps done in it, samples of it consumed."""

    epoch: int
    step_in_epoch: int
    sample_in_epoch: int


def saved_position(state: dict[str, Any], current_global_batch: int) -> Position:
    """The position a loader's `state` holds, in either the sample or the older step format."""
    steps = int(state.get("step_in_epoch", 0))
    if "sample_in_epoch" in state:
        sample = int(state["sample_in_epoch"])
    else:  # the step format: steps of the global batch it was saved with
        sample = steps * int(state.get("global_batch_size", current_global_batch))
    return Position(int(state["epoch"]), steps, sample)


def continue_at(position: Position, dataset_len: int, global_batch: int) -> Position:
    """`position`, or the next epoch's start when what is left cannot fill one global batch.

    A smaller world leaves more steps in an epoch, a larger one fewer: after a grow, the rest
    of the epoch may no longer fill one global batch, and that epoch is over.
    """
    if dataset_len - position.sample_in_epoch < global_batch:
        return Position(position.epoch + 1, 0, 0)
    return position


def change_line(
    state: dict[str, Any], resumed: Position, global_batch: int, world: int, accumulation: int
) -> str | None:
    """The one line that says a resume crossed a change of world or global batch; else None.

    ``distrain: resumed at sample 1248 of epoch 0 with global batch 32 (was 48: the world
    changed 3 → 2)``.  A state of the step format holds no world size: with the per-process
    batch unchanged, it was the saved global batch over this one's share of a process.
    """
    saved_batch = int(state.get("global_batch_size", global_batch))
    share = global_batch // world  # samples one process takes per step
    saved_world = state.get("world_size")
    if saved_world is None and saved_batch % share == 0:
        saved_world = saved_batch // share
    world_changed = saved_world is not None and int(saved_world) != world
    if saved_batch == global_batch and not world_changed:
        return None
    where = (
        f"distrain: resumed at sample {resumed.sample_in_epoch} of epoch {resumed.epoch} "
        f"with global batch {global_batch}"
    )
    why = f"the world changed {saved_world} → {world}" if world_changed else "batch_size changed"
    if saved_batch == global_batch:  # kept by global_batch=, through accumulation
        return (
            f"{where} (kept: {why}; {accumulation} micro-batch(es) of "
            f"{share // accumulation} per process and step)"
        )
    return f"{where} (was {saved_batch}: {why})"
