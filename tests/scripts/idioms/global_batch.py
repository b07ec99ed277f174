"""A fixed global batch split over the processes: ``batch_size = GLOBAL_BATCH // world_size``."""

import torch
import torch.nn.functional as F
from idiom_common import CKPT, STEPS, STRATEGY, after_step, dataset, finish, model

import distrain

GLOBAL_BATCH = 48

ctx = distrain.init()
net = ctx.prepare_model(model(), strategy=STRATEGY)
loader = ctx.prepare_loader(dataset(), batch_size=GLOBAL_BATCH // ctx.world_size)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
ckpt = ctx.checkpointer(CKPT, every_steps=1)
step = ckpt.restore(model=net, optimizer=opt, loader=loader).step

while step < STEPS:
    for xb, yb, ib in loader:
        loss = F.cross_entropy(net(xb.to(ctx.device)), yb.to(ctx.device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        ckpt.maybe_save(step)
        after_step(ctx.rank, step, ib)
        if step >= STEPS:
            break
ckpt.close()
finish(ctx.unwrap(net), ctx.rank, ctx.world_size, step)
ctx.shutdown()
