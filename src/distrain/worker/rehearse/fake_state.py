"""The stand-in CUDA devices' shared state: how many, the current one, their generator seeds."""

from __future__ import annotations

from typing import Any

import torch


class _State:
    count = 1
    current = 0
    seeds: dict[int, int] = {}


def _index(device: Any = None) -> int:
    if device is None:
        return _State.current
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = device.index
    elif isinstance(device, str):
        index = torch.device(device).index
    else:
        index = int(device)
    index = _State.current if index is None or index < 0 else index
    if index >= _State.count:
        raise torch.AcceleratorError(
            f"CUDA error: invalid device ordinal (device {index}; {_State.count} stand-in devices)"
        )
    return index
