"""GPU-only checks (skipped without CUDA): NCCL bench comm and the doctor's GPU probes."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import python, run

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_2_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")


@needs_gpu
def test_doctor_sees_the_gpu() -> None:
    res = run([python(), "-m", "distrain.cli", "doctor", "--json", "--expect-gpu"], timeout=120)
    checks = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["gpu.nvml"]["status"] == "ok" and checks["gpu.nvml"]["data"]["gpus"], checks[
        "gpu.nvml"
    ]
    assert checks["gpu.torch"]["status"] == "ok", checks["gpu.torch"]
    assert checks["gpu.driver"]["status"] in ("ok", "warn") and checks["gpu.arch.0"]["status"] in (
        "ok",
        "warn",
    )


@needs_2_gpus
def test_nccl_bench_comm_and_all_ranks_doctor() -> None:
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "bench",
            "comm",
            "-n",
            "2",
            "--json",
            "-e",
            "16M",
            "-f",
            "16",
            "--iters",
            "5",
        ],
        timeout=300,
    )
    doc = json.loads(res.stdout)
    assert res.returncode == 0 and doc["backend"] == "nccl" and doc["summary"]["all_correct"], (
        res.stderr[-3000:]
    )
    assert all(r["busbw_gbps"] > 0 for r in doc["results"])
    res = run([python(), "-m", "distrain.cli", "doctor", "-n", "2", "--json"], timeout=300)
    doc = json.loads(res.stdout)
    assert doc["ranks"]["backend"] == "nccl"
    assert {c["id"]: c for c in doc["checks"]}["ranks.allreduce"]["status"] == "ok"
