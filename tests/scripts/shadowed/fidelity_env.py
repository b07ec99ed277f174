"""The fidelity probe of a script that sets torch's logging before it imports torch (issue 41):
torchrun's worker has dynamo's logger at DEBUG; so must `distrain run`'s."""

import os

os.environ["TORCH_LOGS"] = "+dynamo"

import torch.distributed as dist  # noqa: E402
from probe_record import record, write  # noqa: E402

dist.init_process_group("gloo")
write(record(dist.get_rank(), dist.get_world_size(), __file__))
dist.barrier()
dist.destroy_process_group()
