"""`distrain run --cpu` rehearses what real CUDA scripts use beyond DDP: torch.compile, FSDP2.

- nanoGPT compiles its model by default: under the rehearsal ``torch.cuda.is_available()`` is
  true, and inductor used to probe Triton's NVIDIA driver (no libcuda: the compile failed);
  Dynamo's ``isinstance`` checks against ``torch.cuda.MemPool`` & co. failed on stand-ins that
  were functions.  Inductor's cache is a fresh folder, so the compile is timed as a new user's.
- torchtitan's llama3 builds its flex-attention block mask with ``torch.compile``: Dynamo reads
  ``torch.cuda.use_mem_pool.__wrapped__`` while tracing, which the stand-in lacked; and it reads
  the CUDA generator's state, which overflowed for a seed of 2**63 or more.
- FSDP2/torchtitan build ``init_device_mesh("cuda", ...)``: the mesh becomes a CPU mesh on the
  gloo group, and ``fully_shard`` trains on CPU tensors.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import REPO, python, run

SCRIPTS = REPO / "tests" / "gpu_scripts"


def rehearse(tmp_path: Path, script: str, timeout: float, *flags: str) -> str:
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    cmd = [
        python(),
        "-m",
        "distrain.cli",
        "run",
        "--cpu",
        "-n",
        "2",
        str(SCRIPTS / script),
        "--out",
        str(tmp_path),
        *flags,
    ]
    res = run(cmd, timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "distrain run --cpu: 2 CPU processes stand in for 2 GPUs" in res.stderr, res.stderr[
        -3000:
    ]
    return res.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_torch_compile_rehearses(tmp_path: Path) -> None:
    """torch.compile(model) + DDP(device_ids) trains 2 ranks under --cpu (inductor's C++ code)."""
    err = rehearse(tmp_path, "compile_torchrun.py", timeout=540)
    saved = torch.load(tmp_path / "final.pt", weights_only=True)
    assert saved["graphs"] >= 1, "the model ran eagerly: nothing was compiled"
    assert len(saved["losses"]) == 3 and all(math.isfinite(x) for x in saved["losses"]), saved[
        "losses"
    ]
    assert "DDP(device_ids=...)" in err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["fully_shard", "replicate"])
def test_fsdp2_on_a_cuda_device_mesh_rehearses(tmp_path: Path, mode: str) -> None:
    """init_device_mesh("cuda", (2,)) + fully_shard or replicate: a CPU mesh, training, and both
    ranks end with the same full parameters."""
    err = rehearse(tmp_path, "fsdp2_mesh.py", 240, "--mode", mode)
    saved = torch.load(tmp_path / "final.pt", weights_only=True)
    assert saved["mesh"] == "cpu"
    assert all(torch.equal(saved["ranks"][1][k], v) for k, v in saved["ranks"][0].items())
    assert [tuple(v.shape) for v in saved["model"].values()] == [(32, 16), (32,), (4, 32), (4,)]
    assert all(torch.isfinite(v).all() for v in saved["model"].values())
    assert "DeviceMesh(cuda) → cpu ×2" in err, err[-2000:]


@pytest.mark.timeout(300)
def test_a_compiled_flex_attention_block_mask_rehearses(tmp_path: Path) -> None:
    """create_block_mask(..., device="cuda", _compile=True) under --cpu: a CPU run's mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    rehearse(tmp_path, "block_mask_compiled.py", 240)
    saved = json.loads((tmp_path / "mask.json").read_text())
    mask = create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 256, 256, device="cpu")
    assert saved == {"shape": list(mask.shape), "blocks": int(mask.kv_num_blocks.sum())}


@pytest.mark.timeout(300)
def test_a_seed_from_the_whole_64_bit_range_survives_compile(tmp_path: Path) -> None:
    """torch.manual_seed(2**64 - 3), a CUDA state round trip, then torch.compile under --cpu."""
    rehearse(tmp_path, "big_seed.py", 240)
    assert json.loads((tmp_path / "seed.json").read_text()) == {"seed": 2**64 - 3, "sum": 6.0}
