"""Hugging Face Accelerate on top: ``Accelerator().prepare`` and ``accelerator.backward``.

On a machine without GPUs Accelerate trains multi-process only with ``cpu=True`` (or
ACCELERATE_USE_CPU=1); without it each rank trains alone, so the script asks for the CPU there.
"""

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from idiom_common import STEPS, after_step, dataset, finish, model
from torch.utils.data import DataLoader

accelerator = Accelerator(cpu=not torch.cuda.is_available())
net = model()
loader = DataLoader(dataset(), batch_size=16, shuffle=True, drop_last=True,
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
opt = torch.optim.SGD(net.parameters(), lr=0.1)
net, opt, loader = accelerator.prepare(net, opt, loader)

step = 0
while step < STEPS:
    for xb, yb, ib in loader:
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
        step += 1
        after_step(accelerator.process_index, step, ib)
        if step >= STEPS:
            break
finish(accelerator.unwrap_model(net), accelerator.process_index, accelerator.num_processes, step)
accelerator.end_training()
