"""What a rank's process costs right now: resident memory (psutil) and its GPU (NVML).

Both probes are read once per metrics record, never per training step.  NVML is optional:
without a driver (CPU machines, containers without ``--gpus``) the GPU probe stays silent and
returns nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psutil


class ProcessProbe:
    """Resident set size of this process, in bytes."""

    def __init__(self) -> None:
        self._proc = psutil.Process()

    def rss(self) -> int:
        """Current RSS in bytes (0 if the OS refuses to tell)."""
        try:
            return int(self._proc.memory_info().rss)
        except psutil.Error:
            return 0


class GPUProbe:
    """Utilisation and memory of one GPU through NVML; empty when NVML is unavailable."""

    def __init__(self, index: int | None, visible_devices: str | None = None) -> None:
        """`visible_devices`: CUDA_VISIBLE_DEVICES as distrain.settings read it (None: unset)."""
        self._handle: Any = None
        self._nvml: Any = None
        if index is None:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            physical = _physical_index(index, visible_devices or "")
            if isinstance(physical, str):
                self._handle = pynvml.nvmlDeviceGetHandleByUUID(physical)
            else:
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(physical)
            self._nvml = pynvml
        except Exception:  # no driver, no library, no such device: the GPU columns stay empty
            self._handle = None

    @property
    def available(self) -> bool:
        """True when NVML answered for this GPU."""
        return self._handle is not None

    def read(self) -> dict[str, float]:
        """``gpu_util`` (%), ``gpu_mem`` and ``gpu_mem_total`` (bytes); {} without NVML."""
        if self._handle is None:
            return {}
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        except Exception:
            return {}
        return {
            "gpu_util": float(util.gpu),
            "gpu_mem": float(mem.used),
            "gpu_mem_total": float(mem.total),
        }

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handle = None


def _physical_index(index: int, visible_devices: str) -> int | str:
    """NVML counts all GPUs, CUDA only the visible ones: map through CUDA_VISIBLE_DEVICES.

    Returns an NVML index, or a ``GPU-…`` UUID when CUDA_VISIBLE_DEVICES names devices that way.
    """
    visible = [v.strip() for v in visible_devices.split(",") if v.strip()]
    if index < len(visible):
        if visible[index].isdigit():
            return int(visible[index])
        if visible[index].startswith(("GPU-", "MIG-")):
            return visible[index]
    return index
