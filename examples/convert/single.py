"""A one-device training script: the 'before' of the conversion example."""

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
dataset = TensorDataset(x, y)

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
model = model.to(device)
loader = DataLoader(dataset, batch_size=64, shuffle=True)
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
    acc = correct / total
    print(f"epoch {epoch}: loss {loss.item():.3f} train acc {acc:.3f}")

torch.save(model.state_dict(), "model.pt")
