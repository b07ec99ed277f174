"""Train a small CNN on scikit-learn's handwritten digits, on 1 or N processes.

    python examples/train_digits.py                      # one process
    distrain run -n 2 examples/train_digits.py           # two processes (GPUs, else CPU/gloo)
    torchrun --nproc-per-node 2 examples/train_digits.py # or any other launcher
    distrain run -n 2 examples/train_digits.py --image-size 32 --width 4   # compute-bound variant

Real data with no download: 1797 8×8 images, a fixed-seed 80/20 split.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--epochs", type=int, default=15)
p.add_argument(
    "--batch-size", type=int, default=32, help="per process; the global batch is this × processes"
)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument(
    "--image-size",
    type=int,
    default=8,
    help="upsample the 8×8 images (32: 16× the compute per sample)",
)
p.add_argument(
    "--width", type=int, default=1, help="channel multiplier of the CNN (compute grows ~width²)"
)
p.add_argument("--sync-bn", action="store_true", help="batch statistics across all processes")
p.add_argument("--amp", action="store_true", help="bf16 autocast on CPU, fp16 on GPU")
p.add_argument(
    "--comm-hook",
    default=None,
    help="compress gradient all-reduce: bf16, fp16 or powersgd (changes numerics)",
)
p.add_argument("--out", default="out/digits", help="rank 0 writes model.pt here")
p.add_argument(
    "--checkpoint-dir", default=None, help="save here and resume from here automatically"
)
p.add_argument(
    "--checkpoint-every",
    type=int,
    default=50,
    help="steps between checkpoints (and at each epoch end)",
)
args = p.parse_args()

# -- data: fixed-seed split, identical on every rank -----------------------------------------
digits = load_digits()
x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # N×1×8×8 in [0, 1]
if args.image_size != 8:
    x = F.interpolate(x, size=args.image_size, mode="bilinear", align_corners=False)
y = torch.tensor(digits.target)
perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
n_test = len(x) // 5
test_set = TensorDataset(x[perm[:n_test]], y[perm[:n_test]])
train_set = TensorDataset(x[perm[n_test:]], y[perm[n_test:]])


class Net(nn.Module):
    def __init__(self, size: int, w: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32 * w, 3, padding=1),
            nn.BatchNorm2d(32 * w),
            nn.ReLU(),
            nn.Conv2d(32 * w, 64 * w, 3, padding=1),
            nn.BatchNorm2d(64 * w),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * w * 16, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


ctx = distrain.init(
    precision=("bf16" if not torch.cuda.is_available() else "fp16") if args.amp else "fp32"
)  # 1
torch.manual_seed(args.seed)
model = ctx.prepare_model(
    Net(args.image_size, args.width), sync_bn=args.sync_bn, comm_hook=args.comm_hook
)  # 2: same weights everywhere
train_loader = ctx.prepare_loader(train_set, batch_size=args.batch_size, seed=args.seed)  # 3
test_loader = ctx.prepare_eval_loader(test_set, batch_size=256)  # every test sample exactly once
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train_loader))
# no --checkpoint-dir: nothing is saved, but under --replicas a replacement still copies all of this
ckpt = ctx.checkpointer(args.checkpoint_dir, every_steps=args.checkpoint_every, every_epochs=1)
step = ckpt.restore(
    model=model, optimizer=opt, scheduler=sched, loader=train_loader
).step  # 6: resume


def evaluate() -> tuple[float, float]:
    net = ctx.unwrap(model).eval()
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    with torch.no_grad():
        for xb, yb in test_loader:
            xb, yb = xb.to(ctx.device), yb.to(ctx.device)
            logits = net(xb).float()
            totals += torch.tensor(
                [
                    F.cross_entropy(logits, yb, reduction="sum").item(),
                    (logits.argmax(1) == yb).sum().item(),
                    len(yb),
                ],
                dtype=torch.float64,
            )
    net.train()
    loss_sum, correct, count = ctx.all_reduce(totals).tolist()  # 4: exact across ranks
    return loss_sum / count, correct / count


for epoch in range(train_loader.epoch, args.epochs):  # a resumed run starts mid-way
    for xb, yb in train_loader:  # the epoch advances by itself: no set_epoch
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)
        with ctx.autocast():
            logits = model(xb)  # bf16/fp16 under --amp
            loss = F.cross_entropy(logits, yb)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        if not ctx.step(opt):  # False only under --replicas, for a step the quorum did not commit
            continue
        sched.step()
        ctx.log(
            loss=loss, lr=sched.get_last_lr()[0], samples=len(xb), epoch=epoch + 1
        )  # distrain top, TensorBoard, bench
        step += 1
        ckpt.maybe_save(step)  # every N steps; on SIGTERM/SIGINT: save, then exit
    test_loss, test_acc = evaluate()
    ctx.log(advance=False, accuracy=test_acc, test_loss=test_loss)
    ctx.print(
        f"epoch {epoch + 1}/{args.epochs}  train loss {loss.item():.4f}  test loss "
        f"{test_loss:.4f}  test acc {test_acc:.4f}"
        f"  ({str(logits.dtype).removeprefix('torch.')} compute)"
    )
test_loss, test_acc = evaluate()  # also defined when a resumed run had nothing left to train
ckpt.save(step)  # the final state: a rerun finds nothing left to do
ckpt.close()
if ctx.is_main:  # 5: rank 0 alone writes
    os.makedirs(args.out, exist_ok=True)
    torch.save(ctx.unwrap(model).state_dict(), os.path.join(args.out, "model.pt"))
ctx.print(
    f"done: test acc {test_acc:.4f} test loss {test_loss:.4f} on {ctx.world_size} process(es)"
)
ctx.shutdown()
