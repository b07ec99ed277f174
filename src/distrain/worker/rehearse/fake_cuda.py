"""``torch.cuda`` (and ``torch.accelerator``) answering for N stand-in devices on the CPU.

``is_available()`` is true and ``device_count()`` is the number of local processes (N);
``set_device``/``current_device``/``device(i)`` keep a current index and refuse one past N as
CUDA does; ``synchronize``, ``empty_cache``, streams and events are no-ops (an event still
measures wall time, so ``elapsed_time`` is a real number); memory statistics are zeros that stay
consistent with each other; the CUDA generator seeds and states are kept apart from the CPU's, so
``torch.cuda.manual_seed`` does not change the CPU's random stream (as on a GPU).  Any other
``torch.cuda`` function that would reach the driver stops with a one-line refusal.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from distrain.process.patching import like as _like, replace
from distrain.worker.rehearse.devices import MAPPED
from distrain.worker.rehearse.fake_rng import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    set_rng_state,
    set_rng_state_all,
)
from distrain.worker.rehearse.fake_state import _index, _State
from distrain.worker.rehearse.fake_streams import Event, Stream, current_stream, stream
from distrain.worker.rehearse.refuse import refuse

NAME = "CPU (distrain run --cpu)"


def is_available() -> bool:
    """True: N CPU processes stand in for N GPUs."""
    return True


def device_count() -> int:
    """The number of stand-in devices: the local processes of this job."""
    return _State.count


def set_device(device: Any) -> None:
    """Make `device` current (an index past device_count() fails as on CUDA)."""
    MAPPED["set_device"] += 1
    _State.current = _index(device)


def current_device() -> int:
    """The index set by set_device (0 at start)."""
    return _State.current


def synchronize(device: Any = None) -> None:
    """CPU ops are synchronous: nothing to wait for."""
    MAPPED["synchronize"] += 1


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _stats(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {}


def _snapshot(*args: Any, **kwargs: Any) -> list[Any]:
    return []


def _summary(*args: Any, **kwargs: Any) -> str:
    return f"{NAME}: no CUDA memory is allocated in a rehearsal\n"


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes: the host's available and total memory."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return free, total


def get_device_name(device: Any = None) -> str:
    """The stand-in's name."""
    _index(device)
    return NAME


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """(8, 0): bf16 and TF32 checks in scripts take their GPU path."""
    _index(device)
    return (8, 0)


def get_device_properties(device: Any = None) -> SimpleNamespace:
    """name, total_memory (the host's), major/minor, multi_processor_count (the usable cores)."""
    index = _index(device)
    return SimpleNamespace(
        name=NAME,
        total_memory=mem_get_info()[1],
        major=8,
        minor=0,
        multi_processor_count=os.cpu_count() or 1,
        is_integrated=False,
        is_multi_gpu_board=False,
        uuid=f"distrain-cpu-{index}",
        L2_cache_size=0,
        warp_size=32,
        gcnArchName="",
        index=index,
    )


class device:  # noqa: N801 - torch.cuda.device's name
    """``with torch.cuda.device(i):`` makes i current inside the block."""

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev = 0

    def __enter__(self) -> None:
        self.prev = _State.current
        if self.idx >= 0:
            _State.current = self.idx

    def __exit__(self, *exc: object) -> None:
        _State.current = self.prev


class device_of(device):  # noqa: N801 - torch.cuda.device_of's name
    """``with torch.cuda.device_of(tensor):`` the tensor is on the CPU, so the current device."""

    def __init__(self, obj: Any) -> None:
        super().__init__(None)


_REPLACEMENTS: dict[str, Any] = {
    "is_available": is_available,
    "device_count": device_count,
    "set_device": set_device,
    "current_device": current_device,
    "synchronize": synchronize,
    "device": device,
    "device_of": device_of,
    "Stream": Stream,
    "Event": Event,
    "current_stream": current_stream,
    "default_stream": current_stream,
    "stream": stream,
    "set_stream": _nothing,
    "get_device_name": get_device_name,
    "get_device_capability": get_device_capability,
    "get_device_properties": get_device_properties,
    "mem_get_info": mem_get_info,
    "is_current_stream_capturing": _false,
    "is_initialized": is_available,
    "init": _nothing,
    "empty_cache": _nothing,
    "ipc_collect": _nothing,
    "is_bf16_supported": is_available,
    "is_tf32_supported": is_available,
    "set_per_process_memory_fraction": _nothing,
    "set_sync_debug_mode": _nothing,
    "get_sync_debug_mode": _zero,
    "memory_allocated": _zero,
    "max_memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_reserved": _zero,
    "memory_cached": _zero,
    "max_memory_cached": _zero,
    "device_memory_used": _zero,
    "reset_peak_memory_stats": _nothing,
    "reset_max_memory_allocated": _nothing,
    "reset_max_memory_cached": _nothing,
    "reset_accumulated_memory_stats": _nothing,
    "memory_stats": _stats,
    "memory_stats_as_nested_dict": _stats,
    "memory_snapshot": _snapshot,
    "memory_summary": _summary,
    "manual_seed": manual_seed,
    "manual_seed_all": manual_seed_all,
    "seed": _nothing,
    "seed_all": _nothing,
    "initial_seed": initial_seed,
    "get_rng_state": get_rng_state,
    "set_rng_state": set_rng_state,
    "get_rng_state_all": get_rng_state_all,
    "set_rng_state_all": set_rng_state_all,
}
#: torch.cuda.<kind>Tensor legacy types, which become the CPU's torch.<kind>Tensor
_LEGACY_TYPES = (
    "Float",
    "Double",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
)
#: torch.cuda functions a rehearsal cannot stand in for: name → what it is
_REFUSED = {
    "CUDAGraph": "CUDA graphs",
    "graph": "CUDA graphs",
    "make_graphed_callables": "CUDA graphs",
    "graph_pool_handle": "CUDA graphs",
    "utilization": "NVML",
    "temperature": "NVML",
    "power_draw": "NVML",
    "clock_rate": "NVML",
    "memory_usage": "NVML",
    "list_gpu_processes": "NVML",
    "ExternalStream": "an external CUDA stream",
    "CUDAPluggableAllocator": "a custom CUDA allocator",
    "change_current_allocator": "a custom CUDA allocator",
    "MemPool": "a CUDA memory pool",
    "use_mem_pool": "a CUDA memory pool",
    "caching_allocator_alloc": "raw CUDA memory",
    "current_blas_handle": "a cuBLAS handle",
}


def _refusing(name: str, what: str, original: Any) -> Any:
    """A stand-in that refuses when called (a class stays a class: Dynamo calls isinstance on it)"""

    def refuse_call(*args: Any, **kwargs: Any) -> Any:
        refuse(f"torch.cuda.{name}() ({what})")

    if not isinstance(original, type):
        return _like(original, refuse_call)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        refuse_call()

    try:  # the class's own signature (from __new__ or __init__), with self in front for __init__
        signature = inspect.signature(original)
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        __init__.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_param, *signature.parameters.values()]
        )
    except (TypeError, ValueError):
        pass
    init = _like(__init__, __init__)
    return type(
        name,
        (),
        {"__init__": init, "__module__": original.__module__, "__doc__": f"refused: {what}"},
    )


def _accelerator() -> None:
    acc = torch.accelerator
    stand_ins: dict[str, Callable[..., Any]] = {
        "is_available": is_available,
        "device_count": device_count,
        "current_accelerator": current_accelerator,
        "current_device_index": current_device,
        "current_device_idx": current_device,
        "set_device_index": set_device,
        "set_device_idx": set_device,
        "synchronize": synchronize,
        "empty_cache": _nothing,
        "current_stream": current_stream,
        "set_stream": _nothing,
        "memory_allocated": _zero,
        "max_memory_allocated": _zero,
        "memory_reserved": _zero,
        "max_memory_reserved": _zero,
        "memory_stats": _stats,
        "reset_peak_memory_stats": _nothing,
        "reset_accumulated_memory_stats": _nothing,
        "get_memory_info": mem_get_info,
        "get_device_capability": accelerator_capability,
    }
    for name, fn in stand_ins.items():
        if hasattr(acc, name):
            replace(acc, name, _like(getattr(acc, name), fn), feature="rehearse")


def current_accelerator(check_available: bool = False) -> torch.device:
    """torch.accelerator.current_accelerator(): the stand-in CUDA device."""
    return torch.device("cuda")


def accelerator_capability(device: Any = None, /) -> dict[str, Any]:
    """torch.accelerator.get_device_capability(): the dtypes a script may ask about."""
    return {"supported_dtypes": [torch.float32, torch.float16, torch.bfloat16]}


def install(count: int) -> None:
    """Make torch.cuda (and torch.accelerator) answer for `count` stand-in devices."""
    _State.count = max(1, count)
    cuda = torch.cuda
    for name, fn in _REPLACEMENTS.items():
        replace(
            cuda,
            name,
            fn if isinstance(fn, type) else _like(getattr(cuda, name), fn),
            feature="rehearse",
        )
    for name, what in _REFUSED.items():
        if hasattr(cuda, name):
            replace(cuda, name, _refusing(name, what, getattr(cuda, name)), feature="rehearse")
    for kind in (
        _LEGACY_TYPES
    ):  # torch.cuda.FloatTensor(3), x.type(torch.cuda.HalfTensor), isinstance(x, ...)
        replace(cuda, f"{kind}Tensor", getattr(torch, f"{kind}Tensor"), feature="rehearse")
    for name in ("CUDAGraph", "graph", "make_graphed_callables"):
        replace(
            cuda.graphs,
            name,
            _refusing(name, "CUDA graphs", getattr(cuda.graphs, name)),
            feature="rehearse",
        )
    for name in ("range_push", "range_pop", "range", "mark", "range_start", "range_end"):
        if hasattr(cuda.nvtx, name):
            replace(
                cuda.nvtx, name, _like(getattr(cuda.nvtx, name), _nvtx(name)), feature="rehearse"
            )
    _accelerator()


def _nvtx(name: str) -> Callable[..., Any]:
    if name == "range":
        import contextlib

        return lambda *a, **k: contextlib.nullcontext()
    return functools.partial(_zero)
