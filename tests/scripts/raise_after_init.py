"""A plain script (no distrain) that raises after init_process_group: torch's own [rankN]
exception hook is installed by then; the cause must still be on `distrain run`'s last line."""

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    raise KeyError("the cause, raised after init")
dist.barrier()
