"""GPU-only fault-tolerant trainer in the style of pytorch/examples' multigpu_torchrun.py.

Rank 0 saves a snapshot every epoch; a restarted job (torchrun --max-restarts) resumes from it
with torch.load(map_location=f"cuda:{gpu_id}").  CRASH_ONCE=<file> makes rank 1 die by SIGKILL
in epoch 2 the first time (when <file> does not exist yet), to exercise the restart.

    torchrun --nproc-per-node 2 --max-restarts 1 snapshot_trainer.py --out DIR
    distrain run --cpu -n 2 --max-restarts 1 snapshot_trainer.py --out DIR
"""

import argparse
import os
import signal

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    init_process_group(backend="nccl")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = model.to(self.gpu_id)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.gpu_id])

    def _load_snapshot(self, snapshot_path):
        loc = f"cuda:{self.gpu_id}"
        snapshot = torch.load(snapshot_path, map_location=loc)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.cross_entropy(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for step, (source, targets) in enumerate(self.train_data):
            crash = os.environ.get("CRASH_ONCE")
            if (
                crash
                and epoch == 2
                and step == 1
                and self.gpu_id == 1
                and not os.path.exists(crash)
            ):
                open(crash, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            source = source.to(self.gpu_id)
            targets = targets.to(self.gpu_id)
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch):
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epoch,
        }
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch + 1)


def main(total_epochs, save_every, snapshot_path, out):
    ddp_setup()
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(64, 12), torch.randint(0, 3, (64,)))
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train_data = DataLoader(
        dataset,
        batch_size=8,
        pin_memory=True,
        shuffle=False,
        sampler=DistributedSampler(dataset, seed=0),
    )
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)
    if int(os.environ["RANK"]) == 0:
        torch.save(trainer.model.module.state_dict(), os.path.join(out, "final.pt"))
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("--out", required=True)
    parser.add_argument("--total-epochs", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=1)
    args = parser.parse_args()
    main(args.total_epochs, args.save_every, os.path.join(args.out, "snapshot.pt"), args.out)
