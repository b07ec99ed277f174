"""A distrain job used by the core tests: one script, several checks, results as JSON per rank.

    core_job.py --out DIR --mode train|syncbn|eval|accum|init [--batch-size B] [--steps K]

Every launcher runs this same file unchanged; rank r writes DIR/rank{r}.json.
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from exit_threads import report_at_exit
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--mode", default="train")
p.add_argument("--batch-size", type=int, default=12)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--samples", type=int, default=120, help="training set size (119: does not divide)")
p.add_argument("--n", type=int, default=0, help="exists to prove '--n' reaches the script")
p.add_argument("--log", default="", help="exists to prove '--log' reaches the script")
p.add_argument("--local_rank", type=int, default=None, help="old-style scripts parse this")
args = p.parse_args()
os.makedirs(args.out, exist_ok=True)
# under every launcher, the group (and rank 0's store, where rank 0 hosts it) is gone at exit
report_at_exit(lambda line: open(os.path.join(args.out, f"threads.{os.getpid()}"), "w").write(line))

torch.set_default_dtype(torch.float64)
ctx = distrain.init()
result: dict = {
    "rank": ctx.rank,
    "world_size": ctx.world_size,
    "local_rank": ctx.local_rank,
    "launcher": ctx.env.name,
    "backend": ctx.backend,
    "argv": sys.argv[1:],
    "n": args.n,
    "log": args.log,
    "argv_local_rank": args.local_rank,
    "threads": torch.get_num_threads(),
}


def data(n: int = 120) -> TensorDataset:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, 6, generator=g)
    y = (x @ torch.randn(6, 1, generator=g)).squeeze(1) + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    torch.manual_seed(100 + ctx.rank)  # deliberately different per rank: DDP must broadcast
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))


if args.mode in ("train", "init", "accum"):
    model = ctx.prepare_model(make_model())
    syncs = [0]  # gradient all-reduces DDP ran (its last bucket of each synchronised backward)
    if ctx.distributed:
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def counting_allreduce(
            state: object, bucket: dist.GradBucket
        ) -> torch.futures.Future[torch.Tensor]:
            syncs[0] += int(bucket.is_last())
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook(None, counting_allreduce)
    result["initial"] = [t.tolist() for t in ctx.unwrap(model).state_dict().values()]
    loader = ctx.prepare_loader(data(args.samples), batch_size=args.batch_size, seed=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = micro = 0
    seen: list[int] = []  # sample ids (row sums identify rows; x is random) this rank trained on
    while step < args.steps:
        for xb, yb in loader:
            xb, yb = xb.to(ctx.device), yb.to(ctx.device)
            seen += [round(float(v), 9) for v in xb.sum(1)]
            with ctx.accumulate(model, micro, args.accum):
                loss = F.mse_loss(model(xb).squeeze(1), yb) / args.accum
                loss.backward()
            micro += 1
            if micro % args.accum == 0:
                opt.step()
                opt.zero_grad()
                step += 1
                if step == args.steps:
                    break
    result["final"] = [t.tolist() for t in ctx.unwrap(model).state_dict().values()]
    result["seen"] = seen
    result["allreduces"] = syncs[0]

if args.mode == "syncbn":
    # Each rank normalises its own slice of one global batch; compare with BN on the whole batch.
    g = torch.Generator().manual_seed(11)
    full = torch.randn(6 * ctx.world_size, 3, 4, 4, generator=g)
    upstream = torch.randn(6 * ctx.world_size, 3, 4, 4, generator=g)
    mine = full[ctx.rank * 6 : (ctx.rank + 1) * 6].clone().requires_grad_(True)
    bn = nn.Sequential(nn.BatchNorm2d(3))
    with torch.no_grad():
        bn[0].weight.copy_(torch.tensor([1.5, 0.5, 2.0]))
        bn[0].bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    model = ctx.prepare_model(bn, sync_bn=True)
    out = model(mine)
    (out * upstream[ctx.rank * 6 : (ctx.rank + 1) * 6]).sum().backward()
    inner = ctx.unwrap(model)[0]
    result["bn_class"] = type(inner).__name__
    result["out"] = out.detach().tolist()
    result["grad_in"] = mine.grad.tolist()
    result["grad_w"] = inner.weight.grad.tolist()  # already averaged by DDP
    result["grad_b"] = inner.bias.grad.tolist()
    result["running_mean"] = inner.running_mean.tolist()
    result["running_var"] = inner.running_var.tolist()

if args.mode == "eval":
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images).unsqueeze(1).flatten(1) / 16.0
    y = torch.tensor(d.target)
    test = TensorDataset(x[:359], y[:359])  # odd size on purpose
    torch.manual_seed(5)
    net = nn.Linear(64, 10)
    model = ctx.prepare_model(net)
    correct = count = 0
    seen = []
    with torch.no_grad():
        for xb, yb in ctx.prepare_eval_loader(test, batch_size=32):
            pred = ctx.unwrap(model)(xb).argmax(1)
            correct += int((pred == yb).sum())
            count += len(yb)
    totals = ctx.all_reduce(torch.tensor([correct, count]))
    result["correct"], result["count"] = (int(v) for v in totals.tolist())
    result["shard_size"] = count

os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, f"rank{ctx.rank}.json"), "w") as f:
    json.dump(result, f)
ctx.shutdown()
