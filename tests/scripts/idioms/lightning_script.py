"""A Lightning ``Trainer`` with ``strategy="ddp"``: Lightning detects the torchelastic
environment and starts no processes of its own."""

import os

import lightning as L
import torch
import torch.nn.functional as F
from idiom_common import STEPS, after_step, dataset, finish, model
from torch.utils.data import DataLoader


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = model()

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        xb, yb, ib = batch
        loss = F.cross_entropy(self.net(xb), yb)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):  # noqa: ANN001, ANN201
        after_step(self.global_rank, self.trainer.global_step, batch[2])

    def configure_optimizers(self):  # noqa: ANN201
        return torch.optim.SGD(self.parameters(), lr=0.1)


# as a cluster script writes them: processes per node, nodes
DEVICES = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
NODES = int(os.environ.get("WORLD_SIZE", "1")) // DEVICES
L.seed_everything(0, verbose=False)
module = Module()
trainer = L.Trainer(
    accelerator="cpu" if not torch.cuda.is_available() else "auto",
    devices=DEVICES,
    num_nodes=NODES,
    strategy="ddp",
    max_steps=STEPS,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(module, DataLoader(dataset(), batch_size=16, shuffle=True, drop_last=True))
finish(module.net, trainer.global_rank, trainer.world_size, trainer.global_step)
