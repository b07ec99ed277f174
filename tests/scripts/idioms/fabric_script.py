"""Lightning Fabric on top: ``Fabric().setup``, ``fabric.backward``."""

import os

import lightning as L
import torch
import torch.nn.functional as F
from idiom_common import STEPS, after_step, dataset, finish, model
from torch.utils.data import DataLoader

# as a cluster script writes them: processes per node, nodes
DEVICES = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
NODES = int(os.environ.get("WORLD_SIZE", "1")) // DEVICES
accelerator = "cpu" if not torch.cuda.is_available() else "auto"
fabric = L.Fabric(accelerator=accelerator, strategy="ddp", devices=DEVICES, num_nodes=NODES)
fabric.launch()
fabric.seed_everything(0)
net = model()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
net, opt = fabric.setup(net, opt)
loader = fabric.setup_dataloaders(
    DataLoader(dataset(), batch_size=16, shuffle=True, drop_last=True)
)

step = epoch = 0
while step < STEPS:
    loader.sampler.set_epoch(epoch)
    for xb, yb, ib in loader:
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad()
        fabric.backward(loss)
        opt.step()
        step += 1
        after_step(fabric.global_rank, step, ib)
        if step >= STEPS:
            break
    epoch += 1
finish(net.module, fabric.global_rank, fabric.world_size, step)
