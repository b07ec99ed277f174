"""A fixed global batch on any world size: micro-batches per process and accumulation steps.

``ctx.prepare_loader(dataset, batch_size=16, global_batch=48)`` keeps 48 samples per optimizer
step whatever the number of processes: on 3 processes each takes one micro-batch of 16, on 2
each takes 24 as 2 micro-batches of 12, on 1, 3 micro-batches of 16.  ``batch_size`` is then the
largest micro-batch one process holds (its memory bound).  As in DeepSpeed's elasticity
configuration, a global batch fits only the world sizes that divide it; the job is refused at
start on any other, in one line naming the world sizes that fit and a global batch that fits
every world size up to this one.
"""

from __future__ import annotations

import math


def split(global_batch: int, world: int, max_micro: int) -> tuple[int, int]:
    """(micro-batch per process, micro-batches per step): micro × steps × world = global_batch.

    The micro-batch is the largest one up to `max_micro` that divides this process's share,
    so the accumulation is the smallest possible.
    """
    if global_batch < 1 or max_micro < 1:
        raise ValueError(
            f"global_batch and batch_size must be >= 1, got {global_batch}, {max_micro}"
        )
    if global_batch % world:
        fits = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
        every = math.lcm(global_batch, *range(1, world + 1))
        raise ValueError(
            f"global_batch={global_batch} cannot be split evenly among {world} processes; "
            f"it can among {', '.join(map(str, fits[:12]))}{' …' if len(fits) > 12 else ''}; "
            f"global_batch={every} fits every world size from 1 to {world}"
        )
    share = global_batch // world
    micro = max(m for m in range(1, min(max_micro, share) + 1) if share % m == 0)
    return micro, share // micro
