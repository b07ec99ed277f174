"""What a checkpoint holds besides the registered objects: RNG states, and CPU snapshots for async saves."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch


def rng_state() -> dict[str, Any]:
    """This process's RNG states in weights_only-loadable form."""
    import numpy as np

    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(np_state[0]),
            "keys": torch.from_numpy(np_state[1].astype("int64")),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    import numpy as np

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def _to_cpu_copy(obj: Any, cache: dict[str, torch.Tensor] | None = None, path: str = "") -> Any:
    """A deep copy with every tensor copied to CPU memory (the async snapshot).

    With a `cache`, buffers of the previous snapshot are reused (``copy_`` into them): fresh
    allocations page-fault on first touch, which costs far more than the copy itself (10× here).
    """
    if isinstance(obj, torch.Tensor):
        src = obj.detach()
        buf = cache.get(path) if cache is not None else None
        if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
            buf = torch.empty(src.shape, dtype=src.dtype, device="cpu")
            if cache is not None:
                cache[path] = buf
        buf.copy_(src)
        return buf
    if isinstance(obj, dict):
        return {k: _to_cpu_copy(v, cache, f"{path}/{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_to_cpu_copy(v, cache, f"{path}/{i}") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _unwrap(obj: Any) -> Any:
    return obj.module if isinstance(obj, torch.nn.parallel.DistributedDataParallel) else obj
