"""``distrain.init()`` and a prepared model, but the script's own DistributedSampler and
DataLoader (``set_epoch`` each epoch), as torch's DDP tutorial writes them."""

import torch
import torch.nn.functional as F
from idiom_common import STEPS, STRATEGY, after_step, dataset, finish, model
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import distrain

ctx = distrain.init()
net = ctx.prepare_model(model(), strategy=STRATEGY)
data = dataset()
sampler = DistributedSampler(data, num_replicas=ctx.world_size, rank=ctx.rank, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
opt = torch.optim.SGD(net.parameters(), lr=0.1)

step = epoch = 0
while step < STEPS:
    sampler.set_epoch(epoch)
    for xb, yb, ib in loader:
        loss = F.cross_entropy(net(xb.to(ctx.device)), yb.to(ctx.device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        after_step(ctx.rank, step, ib)
        if step >= STEPS:
            break
    epoch += 1
finish(ctx.unwrap(net), ctx.rank, ctx.world_size, step)
ctx.shutdown()
