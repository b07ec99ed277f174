"""Train a ResNet on a folder of class subfolders (flower_photos layout), on 1 or N processes.

    python examples/train_imagefolder.py --data flower_photos
    distrain run -n 2 examples/train_imagefolder.py --data flower_photos --sync-bn
    distrain run -n 2 examples/train_imagefolder.py --data flower_photos \
        --pretrained resnet34.pth --freeze-layers
    python examples/train_imagefolder.py --data tiny --image-size 32 --epochs 1   # quick, on CPU
    distrain run -n 2 --max-restarts 3 examples/train_imagefolder.py --data flower_photos \
        --checkpoint-dir ckpt
    # + distrain top, TensorBoard:
    distrain run -n 2 --run-dir runs/flowers examples/train_imagefolder.py --data flower_photos
    tensorboard --logdir runs/flowers/tensorboard

DIR/<class>/<image> in any format PIL reads (grayscale and RGBA files are converted to RGB).
Rank 0 writes a fixed-seed 80/20 split per class to OUT/split.json once; every rank reads it.
"""

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms

import distrain

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"}

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--data", required=True, help="folder of class subfolders")
p.add_argument("--arch", choices=("resnet18", "resnet34"), default="resnet34")
p.add_argument(
    "--pretrained", help="state_dict file; only tensors whose name and shape match are loaded"
)
p.add_argument(
    "--freeze-layers",
    action=argparse.BooleanOptionalAction,
    default=False,
    help="train only the final fc layer",
)
p.add_argument(
    "--sync-bn",
    action=argparse.BooleanOptionalAction,
    default=False,
    help="batch statistics across all processes",
)
p.add_argument("--epochs", type=int, default=30)
p.add_argument(
    "--batch-size", type=int, default=16, help="per process; the global batch is this × processes"
)
p.add_argument(
    "--lr", type=float, default=0.01, help="for one process; scaled by the number of processes"
)
p.add_argument("--image-size", type=int, default=224)
p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per rank")
p.add_argument("--seed", type=int, default=0)
p.add_argument(
    "--out", default="out/imagefolder", help="split.json, TensorBoard logs (tb/) and model.pt"
)
p.add_argument(
    "--checkpoint-dir", help="checkpoint here at every epoch end and resume from here automatically"
)
p.add_argument(
    "--checkpoint-every",
    type=int,
    default=0,
    help="also checkpoint every N steps (mid-epoch resume)",
)
args = p.parse_args()


# -- data: one split, written once by rank 0, read by everyone ---------------------------------
def make_split(root: Path, seed: int) -> dict:
    """Per class, a fixed-seed shuffle: 80 % train, 20 % validation (one of each when possible)."""
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    split = {"root": str(root.resolve()), "seed": seed, "classes": classes, "train": [], "val": []}
    for label, name in enumerate(classes):
        files = sorted(
            f.relative_to(root).as_posix()
            for f in (root / name).iterdir()
            if f.suffix.lower() in IMAGE_EXTENSIONS
        )
        random.Random(f"{seed}/{name}").shuffle(files)
        n_val = max(1, round(len(files) * 0.2)) if len(files) >= 2 else 0
        split["val"] += [[f, label] for f in files[:n_val]]
        split["train"] += [[f, label] for f in files[n_val:]]
    return split


class ImageList(Dataset):
    """(relative path, label) pairs under `root`, loaded as RGB whatever the file's mode."""

    def __init__(self, root: Path, items: list, transform: transforms.Compose) -> None:
        self.root, self.items, self.transform = root, items, transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[i]
        with Image.open(self.root / path) as img:
            return self.transform(img.convert("RGB")), label  # L, P, RGBA, CMYK → 3 channels


ctx = distrain.init()  # 1
out, root = Path(args.out), Path(args.data)
split_path = out / "split.json"
if ctx.is_main:
    if not root.is_dir():
        raise SystemExit(f"train_imagefolder: error: --data {root}: not a directory")
    old = json.loads(split_path.read_text()) if split_path.exists() else {}
    if old.get("root") != str(root.resolve()) or old.get("seed") != args.seed:
        split = make_split(root, args.seed)
        if not split["classes"] or not split["train"]:
            raise SystemExit(
                f"train_imagefolder: error: --data {root}: no class subfolders with images"
            )
        out.mkdir(parents=True, exist_ok=True)
        tmp = split_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(split, indent=1))
        os.replace(tmp, split_path)  # atomic: nobody reads half a file
ctx.barrier()  # the split exists before anyone reads it
split = json.loads(split_path.read_text())
classes = split["classes"]

normalize = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
train_tf = transforms.Compose(
    [
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        normalize,
    ]
)
val_tf = transforms.Compose(
    [
        transforms.Resize(math.ceil(args.image_size * 8 / 7)),
        transforms.CenterCrop(args.image_size),
        transforms.ToTensor(),
        normalize,
    ]
)
train_set, val_set = (
    ImageList(root, split["train"], train_tf),
    ImageList(root, split["val"], val_tf),
)

# -- model ---------------------------------------------------------------------------------------
torch.manual_seed(args.seed)
net = getattr(torchvision.models, args.arch)(num_classes=len(classes))
if args.pretrained:
    state = torch.load(
        args.pretrained, map_location="cpu", weights_only=True
    )  # tensors only, no pickle code
    state = state.get("model", state)
    own = net.state_dict()
    matching = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    net.load_state_dict(matching, strict=False)
    ctx.print(
        f"pretrained: loaded {len(matching)} of {len(own)} tensors from {args.pretrained} "
        f"({len(state) - len(matching)} skipped: other name or shape, e.g. the "
        f"{len(classes)}-class fc)"
    )
if args.freeze_layers:
    for name, param in net.named_parameters():
        param.requires_grad = name.startswith("fc.")
model = ctx.prepare_model(net, sync_bn=args.sync_bn)  # 2: same weights everywhere, DDP
train_loader = ctx.prepare_loader(
    train_set, batch_size=args.batch_size, seed=args.seed, num_workers=args.workers
)  # 3
val_loader = ctx.prepare_eval_loader(
    val_set, batch_size=args.batch_size * 2, num_workers=args.workers
)

lr = args.lr * ctx.world_size  # linear scaling: the global batch is world_size × larger
params = [q for q in model.parameters() if q.requires_grad]
opt = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=5e-5)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(
    opt, T_max=args.epochs * len(train_loader), eta_min=lr * 0.01
)

# -- checkpoints: atomic, checksummed, resumed mid-epoch with RNG and sampler position
# (distrain.checkpoint)
ckpt = (
    ctx.checkpointer(args.checkpoint_dir, every_steps=args.checkpoint_every, every_epochs=1)
    if args.checkpoint_dir
    else None
)
step = (
    ckpt.restore(model=model, optimizer=opt, scheduler=sched, loader=train_loader).step
    if ckpt
    else 0
)
if step:
    ctx.print(f"resumed from {args.checkpoint_dir} at step {step} (epoch {train_loader.epoch + 1})")


def evaluate() -> tuple[float, float]:
    m = ctx.unwrap(model).eval()
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    with torch.no_grad():
        for xb, yb in val_loader:
            xb, yb = xb.to(ctx.device), yb.to(ctx.device)
            logits = m(xb).float()
            totals += torch.tensor(
                [
                    F.cross_entropy(logits, yb, reduction="sum").item(),
                    (logits.argmax(1) == yb).sum().item(),
                    len(yb),
                ],
                dtype=torch.float64,
            )
    m.train()
    loss_sum, correct, count = ctx.all_reduce(totals).tolist()  # 4: every val image once
    return loss_sum / max(count, 1), correct / max(count, 1)


ctx.print(
    f"{len(classes)} classes, {len(train_set)} train / {len(val_set)} val images, "
    f"{args.arch}, lr {lr:g} "
    f"({args.lr:g} × {ctx.world_size}), sync_bn={args.sync_bn}, freeze_layers={args.freeze_layers}"
)
for epoch in range(train_loader.epoch, args.epochs):  # a resumed run starts where it stopped
    t0, seen, loss_sum = time.perf_counter(), 0, 0.0
    for xb, yb in ctx.progress(train_loader, description=f"epoch {epoch + 1}"):
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()  # counted by distrain like ctx.step(opt): the watchdog and distrain top see it
        sched.step()
        ctx.log(
            loss=loss, lr=sched.get_last_lr()[0], samples=len(xb), epoch=epoch + 1
        )  # distrain top, TensorBoard, bench
        seen += len(xb)
        loss_sum += loss.item() * len(xb)
        step += 1
        if ckpt:
            ckpt.maybe_save(step)  # at the epoch end (and every N steps); on SIGTERM: save, exit
    seconds = time.perf_counter() - t0
    samples = int(ctx.all_reduce(seen).item())
    train_loss = (ctx.all_reduce(loss_sum) / max(samples, 1)).item()
    val_loss, val_acc = evaluate()
    ctx.log(advance=False, accuracy=val_acc, test_loss=val_loss, train_loss=train_loss)
    ctx.print(
        f"epoch {epoch + 1}/{args.epochs}  train loss {train_loss:.4f}  val loss {val_loss:.4f}  "
        f"val acc {val_acc:.4f}  {seconds:.1f} s"
    )
if ckpt:
    ckpt.save(step)  # the final state: a rerun finds nothing left to do
    ckpt.close()

if ctx.is_main:  # 5: rank 0 alone writes
    torch.save(ctx.unwrap(model).state_dict(), out / "model.pt")
    print(f"done: saved {out / 'model.pt'}")
ctx.shutdown()
