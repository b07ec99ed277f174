"""One training step; then each rank writes the distrain modules its process holds.

    modules_at_step.py OUT_DIR

Rank r writes OUT_DIR/rank{r}.json: the sorted names of ``sys.modules`` starting with
``distrain`` after its first ``ctx.step``, and whether the worker was forked from the fast
start's server.
"""

import json
import os
import sys

import torch

import distrain

ctx = distrain.init()
model = ctx.prepare_model(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = ctx.prepare_loader(torch.utils.data.TensorDataset(torch.ones(8, 4)), batch_size=2)
for (x,) in loader:
    ctx.backward(model(x).sum())
    ctx.step(opt)
    break
held = sorted(m for m in sys.modules if m == "distrain" or m.startswith("distrain."))
forked = "distrain.worker.fast_start.forked" in sys.modules
with open(os.path.join(sys.argv[1], f"rank{ctx.rank}.json"), "w") as f:
    json.dump({"modules": held, "forked": forked}, f)
ctx.shutdown()
