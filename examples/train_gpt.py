"""A small GPT (nanoGPT-like) learning Python source character by character, on 1 or N processes.

    python examples/train_gpt.py                                  # one process, ~1 M parameters
    distrain run -n 2 examples/train_gpt.py --strategy fsdp       # weights, grads, AdamW sharded
    distrain run -n 2 examples/train_gpt.py --size 100m --strategy fsdp --steps 20

The text is this Python's own standard library (the .py files next to os.py): on every machine,
no download.  Bytes are the tokens (vocabulary 256).
"""

import argparse
import glob
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import default_collate

import distrain

SIZES = {"1m": (4, 4, 128), "10m": (6, 6, 384), "100m": (16, 12, 768)}  # layers, heads, width
p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--size", choices=SIZES, default="1m")
p.add_argument("--block-size", type=int, default=64, help="context length in characters")
p.add_argument("--batch-size", type=int, default=8, help="sequences per process and micro-step")
p.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step")
p.add_argument("--steps", type=int, default=300)
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
p.add_argument(
    "--bf16", action="store_true", help="bf16 compute (fp32 gradient reduction under fsdp)"
)
p.add_argument(
    "--activation-checkpointing",
    action="store_true",
    help="recompute each block's activations in backward",
)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--log-every", type=int, default=10)
p.add_argument(
    "--checkpoint-dir", default=None, help="save here and resume from here automatically"
)
p.add_argument("--checkpoint-every", type=int, default=100)
p.add_argument("--out", default="out/gpt", help="rank 0 writes the final model.pt here")
args = p.parse_args()
n_layer, n_head, n_embd = SIZES[args.size]

# -- data: the standard library's source, as bytes; the last 10 % held out ---------------------
files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
text = b"".join(open(f, "rb").read() for f in files)
data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
split = int(0.9 * len(data))


class Windows(torch.utils.data.Dataset):
    """Non-overlapping (input, next-character target) windows of `block` characters."""

    def __init__(self, tokens: torch.Tensor, block: int) -> None:
        self.tokens, self.block = tokens, block

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.tokens[i * self.block : (i + 1) * self.block + 1]
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, n_head, C // n_head).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(256, n_embd), nn.Embedding(args.block_size, n_embd)
        self.blocks = nn.ModuleList(
            [Block() for _ in range(n_layer)]
        )  # the repeated unit FSDP shards
        self.ln_f, self.head = nn.LayerNorm(n_embd), nn.Linear(n_embd, 256, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


ctx = distrain.init(precision="bf16" if args.bf16 else "fp32")  # 1
torch.manual_seed(args.seed)
with ctx.init_model():  # 2: shapes only, no memory: a 100 M model costs nothing here
    model = GPT()
model = ctx.prepare_model(
    model, strategy=args.strategy, activation_checkpointing=args.activation_checkpointing
)  # initialised, sharded (fsdp) or replicated (ddp)
n_params = sum(p.numel() for p in model.parameters())  # DTensors count their full size
train_loader = ctx.prepare_loader(
    Windows(data[:split], args.block_size), batch_size=args.batch_size, seed=args.seed
)  # 3
val_set = Windows(data[split:], args.block_size)
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
ckpt = (
    ctx.checkpointer(args.checkpoint_dir, every_steps=args.checkpoint_every)
    if args.checkpoint_dir
    else None
)
step = ckpt.restore(model=model, optimizer=opt, loader=train_loader).step if ckpt else 0  # resume
ctx.print(
    f"GPT {n_params / 1e6:.1f} M parameters, {len(data) / 1e6:.1f} M characters of Python, "
    f"strategy {args.strategy}"
)


def evaluate(batches: int = 8) -> float:
    """Mean validation loss over `batches` batches per rank (same count: FSDP is collective)."""
    model.eval()
    losses = []
    with torch.no_grad(), ctx.autocast():
        for b in range(batches):
            idx = [(ctx.rank * batches + b) * args.batch_size + i for i in range(args.batch_size)]
            x, y = default_collate([val_set[i % len(val_set)] for i in idx])
            losses.append(
                F.cross_entropy(
                    model(x.to(ctx.device)).flatten(0, 1).float(), y.to(ctx.device).flatten()
                )
            )
    model.train()
    return ctx.all_reduce(torch.stack(losses).mean(), op="mean").item()  # 4


def forever(loader):  # each pass is the next epoch (the loader advances it by itself)
    while True:
        yield from loader


batches, t0, tokens = forever(train_loader), time.perf_counter(), 0
while step < args.steps:
    for micro in range(args.accum):
        x, y = (t.to(ctx.device) for t in next(batches))
        with (
            ctx.accumulate(model, micro, args.accum),
            ctx.autocast(),
        ):  # gradient sync on the last micro-step only
            loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten()) / args.accum
            ctx.backward(loss)
        tokens += x.numel() * ctx.world_size
    norm = ctx.clip_grad_norm(model, 1.0, opt)  # the global norm, also over shards
    ctx.step(opt)
    opt.zero_grad(set_to_none=True)
    step += 1
    ctx.log(
        loss=loss * args.accum, grad_norm=norm, samples=len(x) * args.accum
    )  # distrain top, TensorBoard
    if step % args.log_every == 0 or step == args.steps:
        rate = tokens / (time.perf_counter() - t0)
        ctx.print(
            f"step {step}/{args.steps}  loss {loss.item() * args.accum:.3f}  grad norm "
            f"{norm.item():.2f}  {rate:,.0f} tokens/s"
        )
    if ckpt:
        ckpt.maybe_save(step)  # every N steps; on SIGTERM/SIGINT: save, then exit
val_loss = evaluate()
ctx.print(f"done: validation loss {val_loss:.3f} after {step} steps")
if ctx.device.type == "cuda":
    ctx.print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB (rank 0)")
if ckpt:
    ckpt.save(step)
    ckpt.close()
state = ctx.full_state_dict(model)  # 5: gathered to rank 0's CPU ({} elsewhere), also when sharded
if ctx.is_main:
    os.makedirs(args.out, exist_ok=True)
    torch.save(state, os.path.join(args.out, "model.pt"))
ctx.shutdown()
