"""The README's conversion: ``loss.backward(); opt.step()`` on a prepared model and loader,
plus the README's three checkpoint lines."""

import torch
import torch.nn.functional as F
from idiom_common import CKPT, STEPS, STRATEGY, after_step, dataset, finish, model

import distrain

ctx = distrain.init()
net = ctx.prepare_model(model(), strategy=STRATEGY)
loader = ctx.prepare_loader(dataset(), batch_size=16)  # per process
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
ckpt = ctx.checkpointer(CKPT, every_steps=2)
step = ckpt.restore(model=net, optimizer=opt, loader=loader).step

while step < STEPS:
    for xb, yb, ib in loader:
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)
        loss = F.cross_entropy(net(xb), yb)
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
