"""image_classifier.py converted by hand to CPU processes and gloo (its rehearsal's reference).

CPU autocast in float16 (CUDA autocast's dtype), GradScaler("cpu"), distrain's CPU SyncBatchNorm
(torch's refuses CPU tensors), no pinned memory.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import distrain


class Shapes(Dataset):
    """Synthetic 3×16×16 images of 4 classes, made deterministically from the index."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        label = i % 4
        image = torch.randn(3, 16, 16, generator=g) * 0.5
        image[label % 3, label * 4 : label * 4 + 4, :] += 1.0
        return image, label


def make_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 4),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    dist.init_process_group(backend="gloo")

    torch.manual_seed(0)
    model = distrain.convert_sync_batchnorm(make_model(), "cpu")
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cpu")
    criterion = nn.CrossEntropyLoss()

    train_set = Shapes()
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=8, sampler=sampler, num_workers=2, pin_memory=False)

    for epoch in range(args.epochs):
        model.train()
        sampler.set_epoch(epoch)
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = criterion(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        model.eval()
        correct = torch.zeros(2)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            for images, labels in loader:
                correct[0] += (model(images).argmax(1) == labels).sum()
                correct[1] += labels.numel()
        dist.all_reduce(correct)
        if dist.get_rank() == 0:
            print(
                f"epoch {epoch}: accuracy {correct[0].item() / correct[1].item():.3f}, scale "
                f"{scaler.get_scale()}"
            )

    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), os.path.join(args.out, "final.pt"))
        torch.save(
            {"scaler": scaler.state_dict(), "correct": correct}, os.path.join(args.out, "extra.pt")
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
