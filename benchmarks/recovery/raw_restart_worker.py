"""Job of restart_tally.py (and recovery.py --control): plain torch.distributed, no distrain.

What pytorch#135712 hits.

init_process_group("gloo") from torchrun's environment, a few all-reduces; rank 1 SIGKILLs itself
at step 3 on the first attempt.
"""

import os
import signal
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
for step in range(1, 11):
    t = torch.ones(1)
    dist.all_reduce(t)
    if step == 3 and attempt == 0 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
print(f"rank {dist.get_rank()} attempt {attempt} finished", flush=True)
dist.destroy_process_group()
