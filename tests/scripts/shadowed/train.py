"""A script beside its own ``yaml/`` package while PyYAML is installed: which one is imported?

python, torchrun and mp.spawn children import the local one (the script's folder is first on
sys.path); each rank prints the file it got.
"""

import os

import torch.distributed as dist
import yaml

dist.init_process_group("gloo")
print(
    f"rank {dist.get_rank()} yaml from {yaml.__file__} "
    f"marker={getattr(yaml, 'SHADOW_MARKER', None)}",
    flush=True,
)
dist.barrier()
dist.destroy_process_group()
assert os.path.dirname(os.path.abspath(yaml.__file__)).startswith(
    os.path.dirname(os.path.abspath(__file__))
)
