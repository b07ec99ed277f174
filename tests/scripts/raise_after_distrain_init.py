"""A converted script that raises after ``distrain.init()`` on rank 1: rank 0 then loses its
peer (a consequence); `distrain run`'s last line must name rank 1's cause, whichever rank exits
first."""

import torch.distributed as dist

import distrain

ctx = distrain.init()
dist.barrier()
if ctx.rank == 1:
    raise KeyError("the cause, raised after distrain.init")
dist.barrier()
