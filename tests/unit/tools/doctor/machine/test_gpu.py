"""tools/doctor/machine/gpu.py: CUDA_VISIBLE_DEVICES vs the GPU count, and whether a GPU is
expected."""

from __future__ import annotations

import pytest

from distrain.tools.doctor.machine.gpu import gpu_expected, visible_devices


def test_unset_selects_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    assert visible_devices(4) == (None, None)


@pytest.mark.parametrize(
    ("raw", "picked", "problem"),
    [("0,2", [0, 2], None),
     ("GPU-1234,1", [1], None),
     ("", [], "CUDA_VISIBLE_DEVICES is set but empty: torch will see no GPU"),
     ("0,5,1", [0],
      "CUDA_VISIBLE_DEVICES='0,5,1': GPU 5 does not exist (4 present; CUDA stops at it)"),
     ("1,x", [1], "CUDA_VISIBLE_DEVICES='1,x': 'x' is not an index or UUID (CUDA stops at it)"),
     ("1,1", [1], "CUDA_VISIBLE_DEVICES='1,1' names GPU 1 twice")],
)  # fmt: skip
def test_visible_devices(
    monkeypatch: pytest.MonkeyPatch, raw: str, picked: list[int], problem: str | None
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", raw)
    assert visible_devices(4) == (picked, problem)


def test_gpu_expected_strength(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpu_expected(False) == (None, "")
    assert gpu_expected(True) == ("fail", "--expect-gpu was given")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu_expected(False) == ("warn", "CUDA_VISIBLE_DEVICES=0")
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "void")
    assert gpu_expected(False)[0] == "warn"
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    assert gpu_expected(False) == ("fail", "NVIDIA_VISIBLE_DEVICES=all")
