"""A Hugging Face `Trainer` script as users write one: a tiny GPT-2 built from a config (no
download), random tokens, `Trainer.train()`; no distrain.  Each process writes
``final.<rank>.json`` (steps, a sha256 over the parameters) to ``HF_OUT`` at its end."""

import hashlib
import json
import os
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

STEPS = int(os.environ.get("HF_STEPS", "8"))
OUT = Path(os.environ["HF_OUT"])


class RandomTokens(torch.utils.data.Dataset):
    """256 fixed sequences of 16 tokens (labels = inputs: causal LM)."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1234)
        self.ids = torch.randint(0, 128, (256, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
config = GPT2Config(vocab_size=128, n_positions=16, n_embd=32, n_layer=2, n_head=2)
model = GPT2LMHeadModel(config)
args = TrainingArguments(
    output_dir=str(OUT / "trainer"),
    max_steps=STEPS,
    per_device_train_batch_size=8,
    learning_rate=1e-3,
    use_cpu=True,
    ddp_backend="gloo",
    report_to="none",
    save_strategy="no",
    logging_strategy="no",
    seed=0,
    dataloader_num_workers=0,
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=RandomTokens())
trainer.train()
h = hashlib.sha256()
for name, t in model.state_dict().items():
    h.update(name.encode())
    h.update(t.detach().cpu().contiguous().numpy().tobytes())
rank = int(os.environ.get("RANK", "0"))
final = {"rank": rank, "steps": trainer.state.global_step, "digest": h.hexdigest()}
OUT.mkdir(parents=True, exist_ok=True)
(OUT / f"final.{rank}.json").write_text(json.dumps(final))
