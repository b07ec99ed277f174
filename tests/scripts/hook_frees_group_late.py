"""A comm hook whose callback is freed on gloo's thread after the script has shut down.

    distrain run -n 2 tests/scripts/hook_frees_group_late.py

PowerSGD's ``Future.then`` callbacks hold ``group.WORLD`` and run on the group's worker thread,
which frees them just after completing the future the reducer waits on.  Here the callback's
freeing is held back 1 s (an object whose ``__del__`` sleeps, freed before the group), so the
script's ``ctx.shutdown()`` destroys the group first: the callback's reference is then the last
one.  The job must end cleanly, with no thread of the group left (exit_threads.py).
"""

import time

import torch
import torch.distributed as dist
from exit_threads import report_at_exit
from torch import nn

import distrain

report_at_exit(lambda line: print(line, end="", flush=True))  # runs after distrain's shutdown


class FreedLate:
    def __del__(self) -> None:
        time.sleep(1.0)  # meanwhile the main thread goes on to ctx.shutdown()


def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    reduced = dist.all_reduce(bucket.buffer(), async_op=True)
    assert reduced is not None
    # a tuple frees its items last to first: the sleep first, then the group
    held = (dist.group.WORLD, FreedLate())

    def unpack(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        assert held
        return fut.value()[0]

    return reduced.get_future().then(unpack)


ctx = distrain.init(threads=1, verbose=False)
model = ctx.prepare_model(nn.Linear(4, 4))
model.register_comm_hook(None, hook)
model(torch.randn(2, 4)).sum().backward()
ctx.shutdown()
time.sleep(2.0)  # the callback is freed on gloo's thread now, after the group was destroyed
print("ended", ctx.rank, flush=True)
