"""worker/rehearse/devices.py: which device arguments are CUDA, wrappers mapping them to CPU.

The wrappers are applied to stand-in functions here; nothing is installed into torch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from distrain.worker.rehearse import devices
from distrain.worker.rehearse.devices import CPU, cpu_if_cuda, is_cuda


@pytest.fixture(autouse=True)
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    fresh: Counter[str] = Counter()
    monkeypatch.setattr(devices, "MAPPED", fresh)
    return fresh


@pytest.mark.parametrize(
    "device", ["cuda", "cuda:1", torch.device("cuda", 0), torch.device("cuda"), 0, 3]
)
def test_cuda_devices(device: object) -> None:
    assert is_cuda(device) is True


@pytest.mark.parametrize(
    "device", ["cpu", "meta", "cudax", torch.device("cpu"), True, False, None, 1.0]
)
def test_not_cuda(device: object) -> None:
    assert is_cuda(device) is False


def test_cpu_if_cuda_maps_and_counts(counts: Counter[str]) -> None:
    assert cpu_if_cuda("cuda:1", "x") == CPU
    assert cpu_if_cuda(torch.device("cpu"), "x") == torch.device("cpu")
    assert cpu_if_cuda(None, "x") is None
    assert counts == Counter({"x": 1})


def test_factory_wrapper_rewrites_only_a_cuda_device_keyword(counts: Counter[str]) -> None:
    seen: list[dict[str, Any]] = []
    wrapped = devices._with_cpu_device(lambda *a, **k: seen.append(k) or a, "device=cuda")
    assert wrapped(2, 3, device="cuda:0", dtype=torch.float16) == (2, 3)
    wrapped(1, device="cpu")
    wrapped(1)
    assert seen == [{"device": CPU, "dtype": torch.float16}, {"device": "cpu"}, {}]
    assert counts["device=cuda"] == 1


def test_tensor_to_maps_a_leading_device_or_index_but_not_a_dtype(counts: Counter[str]) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    to = devices._tensor_to(lambda self, *a, **k: calls.append((a, k)))
    x = torch.zeros(1)
    to(x, 0)  # x.to(local_rank)
    to(x, "cuda:1", torch.float16)
    to(x, torch.float64)
    to(x, device=torch.device("cuda"), non_blocking=True)
    assert calls == [
        ((CPU,), {}),
        ((CPU, torch.float16), {}),
        ((torch.float64,), {}),
        ((), {"device": CPU, "non_blocking": True}),
    ]
    assert counts[".to(cuda)"] == 3


def test_tensor_type_maps_cuda_type_names() -> None:
    calls: list[Any] = []
    typ = devices._tensor_type(lambda self, *a, **k: calls.append(a))
    typ(torch.zeros(1), "torch.cuda.HalfTensor")
    typ(torch.zeros(1))
    assert calls == [("torch.HalfTensor", False), ()]


def test_factory_names_come_from_aten_schemas() -> None:
    names = set(devices.factory_names())
    assert {"zeros", "randn", "arange", "tensor", "asarray"} <= names
    assert "add" not in names and not any(n.startswith("_") for n in names)
