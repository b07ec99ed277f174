"""`distrain run --cpu` with FSDP2 device meshes, the group started every way torch documents.

tests/gpu_scripts/mesh_probe.py is one script twice: ``--device cuda`` (nccl, a "cuda" mesh,
``.cuda()`` data) rehearsed with ``--cpu``, and ``--device cpu`` (gloo, a CPU mesh) run plainly.
Both do the same float ops on the same CPU, so every rank's full parameters and losses must be
equal bit for bit.  ``init_device_mesh("cuda", ...)`` without ``init_process_group`` starts the
default group through torch/distributed/device_mesh.py's own reference to
``init_process_group``: before the registry replaced every module's reference, torch chose NCCL
there (the stand-in accelerator answers "cuda") and the job died with ``ProcessGroupNCCL is only
supported with GPUs``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import REPO, distrain_run

PROBE = REPO / "tests" / "gpu_scripts" / "mesh_probe.py"
pytestmark = pytest.mark.timeout(300)


def job(out: Path, n: int, *flags: str, cpu: bool) -> str:
    out.mkdir()
    cpu_flag = ["--cpu"] if cpu else []
    res = distrain_run(*cpu_flag, "-n", str(n), str(PROBE), "--out", str(out), *flags, timeout=240)
    assert res.returncode == 0, res.stderr[-4000:]
    return res.stderr


@pytest.mark.parametrize(
    ("start", "mesh", "n"),
    [
        ("mesh", "1d", 2),  # init_device_mesh("cuda", (2,)) starts the group
        ("pg", "1d", 2),  # init_process_group("nccl"), then the mesh
        ("mesh", "hsdp", 4),  # a 2-D ("replicate", "shard") mesh starts the group
        ("pg", "hsdp", 4),
        ("mesh", "none", 2),  # fully_shard without a mesh starts the group (its default mesh)
        ("pg", "none", 2),
    ],
    ids=["mesh-starts-1d", "pg-then-1d", "mesh-starts-hsdp", "pg-then-hsdp", "fsdp-starts", "pg"],
)
def test_a_cuda_mesh_rehearses_bit_for_bit(tmp_path: Path, start: str, mesh: str, n: int) -> None:
    flags = ("--start", start, "--mesh", mesh)
    err = job(tmp_path / "gpu", n, *flags, "--device", "cuda", cpu=True)
    job(tmp_path / "cpu", n, *flags, "--device", "cpu", cpu=False)
    summary = [line for line in err.splitlines() if "distrain run --cpu: mapped in" in line]
    assert len(summary) == 1 and f"nccl → gloo ×{n}" in summary[0], err[-3000:]
    if mesh != "none":
        assert f"DeviceMesh(cuda) → cpu ×{n}" in summary[0], summary
    rehearsed = torch.load(tmp_path / "gpu" / "final.pt", weights_only=True)
    twin = torch.load(tmp_path / "cpu" / "final.pt", weights_only=True)
    assert rehearsed["backend"] == "gloo" and rehearsed["mesh"] == "cpu", rehearsed
    # the stand-in accelerator and the backend torch picks for it agree
    assert rehearsed["accelerator"] == ["cuda", "gloo"], rehearsed
    assert (
        rehearsed["mesh_shape"] == twin["mesh_shape"] == ((2, n // 2) if mesh == "hsdp" else (n,))
    )
    for a, b in zip(rehearsed["ranks"], twin["ranks"], strict=True):
        assert [x.item() for x in a["losses"]] == [x.item() for x in b["losses"]]
        assert list(a["model"]) == list(b["model"])
        for name, value in a["model"].items():
            assert torch.equal(value, b["model"][name]), name
    # HSDP and FSDP: every rank ends with the same full parameters
    first = rehearsed["ranks"][0]["model"]
    assert all(torch.equal(r["model"][k], v) for r in rehearsed["ranks"] for k, v in first.items())
