"""PowerSGD on gloo with a bucket cap far below the model size: distrain must still train.

    distrain run -n 2 tests/scripts/powersgd_buckets.py

Asks DDP for 0.05 MB buckets (the model has ~0.4 MB of gradients, so several buckets without
distrain's one-bucket rule), compresses from step 2, and prints whether every rank ends with the
same parameters.
"""

import torch
from torch import nn

import distrain

ctx = distrain.init(threads=1, verbose=False)
torch.manual_seed(0)
net = nn.Sequential(
    *[m for _ in range(4) for m in (nn.Linear(160, 160), nn.ReLU())], nn.Linear(160, 4)
)
model = ctx.prepare_model(net, comm_hook="powersgd:rank=1,start=2", bucket_cap_mb=0.05)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(ctx.rank)
for _ in range(8):
    x, y = torch.randn(16, 160, generator=gen), torch.randint(0, 4, (16,), generator=gen)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in net.parameters()])
copies = [torch.empty_like(flat) for _ in range(ctx.world_size)]
torch.distributed.all_gather(copies, flat)
if ctx.is_main:
    print("ranks agree:", all(torch.equal(copies[0], c) for c in copies), flush=True)
ctx.shutdown()
