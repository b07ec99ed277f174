"""What torch cannot run on a CPU stops a `distrain run --cpu` job with one line and exit code 3.

Each script is a real 2-process job.  Before these refusals, FlexAttention's backward (what
torchtitan's llama trains with, compiled or not) ended in torch's ``NotImplementedError``
traceback with exit code 1, ``sdpa_kernel`` restricted to GPU-only attention kernels in "No
viable backend", and ``torch.cuda.comm`` in "Found no NVIDIA driver".  CUDA graphs, NVML, Triton
and CUDA extensions are refused too (tests/jobs/test_rehearse.py, test_rehearse_causes.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import python, run

pytestmark = pytest.mark.timeout(300)

HEAD = "import torch, torch.distributed as dist\ndist.init_process_group('nccl')\n"
FLEX = (
    "from torch.nn.attention.flex_attention import flex_attention\n"
    "q = torch.randn(1, 2, 128, 16, device='cuda', requires_grad=True)\n"
)
SDPA = (
    "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
    "q = torch.randn(1, 2, 8, 16, device='cuda')\n"
)
FLEX_BACKWARD = "FlexAttention backward (flex_attention on inputs that require grad)"


@pytest.mark.parametrize(
    ("body", "call"),
    [
        (FLEX + "flex_attention(q, q, q).sum().backward()\n", FLEX_BACKWARD),
        # torchtitan's way: the compiled flex_attention (Dynamo must not trace the refusal)
        (FLEX + "torch.compile(flex_attention)(q, q, q).sum().backward()\n", FLEX_BACKWARD),
        (
            SDPA
            + "with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):\n"
            "    torch.nn.functional.scaled_dot_product_attention(q, q, q)\n",
            "sdpa_kernel(EFFICIENT_ATTENTION, CUDNN_ATTENTION) (attention kernels only a GPU has)",
        ),
        (
            "import torch.cuda.comm\ntorch.cuda.comm.broadcast(torch.ones(2).cuda(), [0, 1])\n",
            "torch.cuda.comm.broadcast() (copies between GPUs)",
        ),
    ],
    ids=["flex-backward", "flex-backward-compiled", "sdpa-gpu-kernels", "cuda-comm"],
)
def test_a_gpu_only_capability_is_refused_in_one_line(tmp_path: Path, body: str, call: str) -> None:
    script = tmp_path / "user.py"
    script.write_text(HEAD + body)
    line = (HEAD + body).rstrip("\n").count("\n") + 1
    if body.startswith(SDPA):
        line -= 1  # the `with` line: the refusal comes as the block is entered
    cmd = [python(), "-m", "distrain.cli", "run", "--cpu", "-n", "2", str(script)]
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    res = run(cmd, timeout=240, env=env, cwd=tmp_path)
    assert res.returncode == 3, res.stderr[-3000:]
    reason = f"distrain run --cpu: cannot rehearse {call} at user.py:{line}: it needs a real GPU"
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("distrain run --cpu: 2 CPU processes stand in"), lines
    assert lines[1] == reason, res.stderr[-3000:]
    assert lines[-1].startswith("distrain run: job failed") and lines[-1].endswith(reason), lines
    # the start line, the reason once, the mapped calls, the verdict: no traceback, no warning
    # (how many processes report their mapped calls depends on which ones the refusal outran)
    assert len(lines) == 4 and lines[2].startswith("distrain run --cpu: mapped in"), lines


def test_a_capturable_optimizer_rehearses(tmp_path: Path) -> None:
    """What the CPU can run is not refused: ``Adam(capturable=True)`` (CUDA-graph-ready state)
    asserted an accelerator and failed at its first step; its arithmetic runs on CPU tensors.
    Both ranks end with the same parameters, and each step lowered the loss."""
    script = tmp_path / "user.py"
    script.write_text(
        HEAD + "import os\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(8, 1).cuda()\n"
        "ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dist.get_rank()])\n"
        "opt = torch.optim.Adam(ddp.parameters(), lr=0.05, capturable=True)\n"
        "x, y = torch.randn(32, 8).cuda(), torch.randn(32, 1).cuda()\n"
        "losses = []\n"
        "for _ in range(5):\n"
        "    loss = torch.nn.functional.mse_loss(ddp(x), y)\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    losses.append(loss.item())\n"
        "assert all(b < a for a, b in zip(losses, losses[1:])), losses\n"
        "weights = [None, None]\n"
        "dist.all_gather_object(weights, model.weight.detach())\n"
        "assert torch.equal(*weights)\n"
        "open(f'trained.{dist.get_rank()}', 'w').write(repr(losses))\n"
    )
    cmd = [python(), "-m", "distrain.cli", "run", "--cpu", "-n", "2", str(script)]
    res = run(cmd, timeout=240, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("trained.*")) == ["trained.0", "trained.1"]
