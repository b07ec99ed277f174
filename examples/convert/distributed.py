"""The same script, distributed: the 'after' of the conversion example (see the README diff)."""

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import distrain

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
dataset = TensorDataset(x, y)

ctx = distrain.init()
device = ctx.device
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
model = ctx.prepare_model(model)
loader = ctx.prepare_loader(dataset, batch_size=64, shuffle=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(5):
    correct = total = 0
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        correct += (logits.argmax(1) == yb).sum().item()
        total += len(yb)
    acc = (ctx.all_reduce(correct) / ctx.all_reduce(total)).item()
    ctx.print(f"epoch {epoch}: loss {loss.item():.3f} train acc {acc:.3f}")

if ctx.is_main:
    torch.save(ctx.unwrap(model).state_dict(), "model.pt")
