"""The distributed and mixed-precision parts of a CUDA script, made to run on CPU processes.

``init_process_group``/``new_group``: nccl (or none) → gloo, ``device_id`` dropped; DDP:
``device_ids``/``output_device`` accepted; DataParallel: the single-device path;
``torch.nn.SyncBatchNorm`` computes with distrain's cross-process batch norm on CPU tensors; CUDA
autocast → CPU autocast (same dtype, float16 by default as on CUDA); ``GradScaler("cuda")`` →
``GradScaler("cpu")``; ``torch.load``: CUDA ``map_location`` → CPU; DataLoader ``pin_memory`` → off;
``with torch.device("cuda")`` → the CPU; ``DeviceMesh("cuda")`` (``init_device_mesh``: FSDP2,
replicate) → a CPU mesh; ``torch.compile``: inductor probes no Triton device; capturable
optimizers (``Adam(capturable=True)``) accept CPU parameters.  Every patch goes through
:mod:`distrain.process.patching`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from distrain.process.patching import (
    Args,
    GroupHook,
    holders,
    like,
    on_init_process_group,
    replace,
    wrap,
)
from distrain.worker.rehearse.devices import CPU, MAPPED, cpu_if_cuda, is_cuda
from distrain.worker.rehearse.refuse import say_once

_replace = wrap


def _gloo(backend: Any) -> str:
    if backend is None or "nccl" in str(backend).lower():
        MAPPED["nccl → gloo"] += 1
        return "gloo"
    return backend


def _gloo_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Args:
    """``init_process_group``'s arguments with nccl (or none) → gloo and no ``device_id``."""
    if args:
        args = (_gloo(args[0]), *args[1:])
    else:
        kwargs["backend"] = _gloo(kwargs.get("backend"))
    if kwargs.get("device_id") is not None:
        MAPPED["init_process_group(device_id)"] += 1
        kwargs["device_id"] = None
    return args, kwargs


def _process_groups() -> None:
    def new(original: Any) -> Any:
        def new_group(*args: Any, **kwargs: Any) -> Any:
            if "backend" in kwargs:
                kwargs["backend"] = _gloo(kwargs["backend"])
            elif len(args) > 2:
                args = (*args[:2], _gloo(args[2]), *args[3:])
            return original(*args, **kwargs)

        return new_group

    # init_process_group has one wrapper, shared with the fast start and self-start (the
    # registry's): the rehearsal rewrites the arguments last, right before torch's function
    on_init_process_group(GroupHook("rehearse", before=_gloo_arguments))
    # torch.accelerator answers "cuda", and torch picks the backend of a group started without
    # one (init_process_group(), init_device_mesh's own start, get_default_backend_for_device)
    # from this table: cuda's is gloo here, so whatever path torch takes it agrees with the CPU
    backends = dict(distributed_c10d.Backend.default_device_backend_map, cuda="gloo")
    replace(distributed_c10d.Backend, "default_device_backend_map", backends, feature="rehearse")
    for module in (dist, distributed_c10d):
        _replace(module, "new_group", new, feature="rehearse")


def _parallel() -> None:
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    signature = inspect.signature(DistributedDataParallel.__init__)

    def ddp(original: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(self, *args, **kwargs)
            for name in ("device_ids", "output_device"):
                if bound.arguments.get(name) is not None:
                    MAPPED[f"DDP({name}=...)"] += 1
                    bound.arguments[name] = None
            original(*bound.args, **bound.kwargs)

        return __init__

    def dp(original: Any) -> Any:
        def __init__(
            self: Any, module: Any, device_ids: Any = None, output_device: Any = None, dim: int = 0
        ) -> None:
            MAPPED["DataParallel → the module itself"] += 1
            torch.nn.Module.__init__(self)
            self.module, self.device_ids, self.dim = module, [], dim
            self.output_device, self.src_device_obj = None, CPU  # forward() then calls the module

        return __init__

    def sync_bn_ok(self: Any, module: Any) -> None:
        """DDP refuses SyncBatchNorm on CPU modules; ours runs there (see _sync_batchnorm)."""

    _replace(DistributedDataParallel, "__init__", ddp, feature="rehearse")
    replace(
        DistributedDataParallel, "_passing_sync_batchnorm_handle", sync_bn_ok, feature="rehearse"
    )
    _replace(DataParallel, "__init__", dp, feature="rehearse")


def _sync_batchnorm() -> None:
    from distrain.parallel.batchnorm import CPUSyncBatchNorm

    def forward(original: Any) -> Any:
        def sync_forward(self: Any, input: torch.Tensor) -> torch.Tensor:
            if input.device.type != "cpu":
                return original(self, input)
            MAPPED["SyncBatchNorm → CPUSyncBatchNorm"] += 1
            return CPUSyncBatchNorm.forward(self, input)

        return sync_forward

    _replace(torch.nn.SyncBatchNorm, "forward", forward, feature="rehearse")


def _amp() -> None:
    from torch.amp import autocast_mode, grad_scaler

    def autocast(original: Any) -> Any:
        def __init__(
            self: Any,
            device_type: str,
            dtype: Any = None,
            enabled: bool = True,
            cache_enabled: Any = None,
        ) -> None:
            if device_type == "cuda":
                MAPPED["autocast(cuda) → autocast(cpu)"] += 1
                device_type, dtype = "cpu", dtype or torch.float16
                if dtype == torch.float16 and enabled:
                    say_once("amp-fp16", fp16_cost_line(cpu_flags()))
            original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

        return __init__

    def scaler(original: Any) -> Any:
        def __init__(
            self: Any,
            device: str = "cuda",
            init_scale: float = 2.0**16,
            growth_factor: float = 2.0,
            backoff_factor: float = 0.5,
            growth_interval: int = 2000,
            enabled: bool = True,
        ) -> None:
            if device == "cuda":
                MAPPED["GradScaler(cuda) → GradScaler(cpu)"] += 1
                device = "cpu"
            original(
                self, device, init_scale, growth_factor, backoff_factor, growth_interval, enabled
            )

        return __init__

    # custom_fwd(device_type="cuda", cast_inputs=...) asks whether *CUDA* autocast is on; the
    # rehearsal's autocast is the CPU's, so the decorator must look there
    def cpu_type(device_type: str) -> str:
        if device_type == "cuda":
            MAPPED["custom_fwd/custom_bwd(cuda) → cpu"] += 1
        return "cpu" if device_type == "cuda" else device_type

    def fwd(original: Any) -> Any:
        def custom_fwd(fwd: Any = None, *, device_type: str, cast_inputs: Any = None) -> Any:
            return original(fwd, device_type=cpu_type(device_type), cast_inputs=cast_inputs)

        return custom_fwd

    def bwd(original: Any) -> Any:
        def custom_bwd(bwd: Any = None, *, device_type: str) -> Any:
            return original(bwd, device_type=cpu_type(device_type))

        return custom_bwd

    for name, make in (("custom_fwd", fwd), ("custom_bwd", bwd)):
        wrapped = getattr(autocast_mode, name)
        _replace(autocast_mode, name, make, feature="rehearse")
        replace(
            torch.amp,
            name,
            functools.wraps(wrapped)(make(wrapped)),
            forwards=True,
            feature="rehearse",
        )
    _replace(autocast_mode.autocast, "__init__", autocast, feature="rehearse")
    _replace(grad_scaler.GradScaler, "__init__", scaler, feature="rehearse")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")),
                set(),
            )
    except OSError:
        return set()


def fp16_cost_line(flags: set[str]) -> str:
    """What rehearsing CUDA fp16 autocast costs here (measured: benchmarks/rehearse/RESULTS.md).

    fp16 stays fp16, so overflows and GradScaler's skipped steps are rehearsed as on a GPU; a
    CPU without native fp16 arithmetic emulates it, and bf16 is no cure there (emulated too).
    """
    native = sorted(flags & {"avx512_fp16", "amx_fp16"})
    how = f"natively ({', '.join(native)})" if native else "in emulation (no avx512_fp16/amx_fp16)"
    cost = "" if native else ": expect ~10-20x the fp32 step time"
    return (
        f"autocast(cuda, float16) runs as CPU autocast float16, which this CPU computes {how}{cost}"
    )


def _load() -> None:
    def load(original: Any) -> Any:
        def torch_load(
            f: Any,
            map_location: Any = None,
            pickle_module: Any = None,
            *,
            weights_only: Any = None,
            mmap: Any = None,
            **pickle_load_args: Any,
        ) -> Any:
            if isinstance(map_location, dict):
                map_location = {k: "cpu" if is_cuda(v) else v for k, v in map_location.items()}
            elif map_location is None or callable(map_location) or is_cuda(map_location):
                # None restores saved CUDA tensors to CUDA; a callable may call storage.cuda()
                if map_location is not None:
                    MAPPED["torch.load(map_location=cuda)"] += 1
                map_location = CPU
            return original(
                f,
                map_location,
                pickle_module,
                weights_only=weights_only,
                mmap=mmap,
                **pickle_load_args,
            )

        return torch_load

    _replace(torch, "load", load, feature="rehearse")


def _loader_and_default_device() -> None:
    from torch.utils import _device
    from torch.utils.data import DataLoader

    def loader(original: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("pin_memory"):
                MAPPED["DataLoader(pin_memory=True) → off"] += 1
                kwargs["pin_memory"] = False
            original(self, *args, **kwargs)

        return __init__

    def context(original: Any) -> Any:
        def __init__(self: Any, device: Any) -> None:
            original(self, cpu_if_cuda(device, "with torch.device(cuda)"))

        return __init__

    _replace(DataLoader, "__init__", loader, feature="rehearse")
    _replace(_device.DeviceContext, "__init__", context, feature="rehearse")


def _compile() -> None:
    # torch.compile asks Dynamo's CUDA interface, i.e. the stand-in torch.cuda.is_available(),
    # whether Triton can run, then loads Triton's NVIDIA driver (no libcuda: the compile fails).
    # The tensors are on the CPU, so inductor's C++ code is what runs: no device probing.
    from torch._inductor import config

    replace(config, "triton_disable_device_detection", True, feature="rehearse")


def _device_mesh() -> None:
    # init_device_mesh("cuda", ...) (FSDP2, replicate, torchtitan) builds DeviceMesh("cuda"):
    # the mesh's device type becomes the CPU's, so its groups use the default gloo backend and
    # fully_shard places the shards on CPU tensors
    from torch.distributed.device_mesh import DeviceMesh

    def mesh(original: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if args and args[0] == "cuda":
                MAPPED["DeviceMesh(cuda) → cpu"] += 1
                args = ("cpu", *args[1:])
            elif kwargs.get("device_type") == "cuda":
                MAPPED["DeviceMesh(cuda) → cpu"] += 1
                kwargs["device_type"] = "cpu"
            original(self, *args, **kwargs)

        return __init__

    _replace(DeviceMesh, "__init__", mesh, feature="rehearse")


def _capturable_optimizers() -> None:
    # Adam(capturable=True) & co. (optimizer state ready for CUDA graph capture) assert that their
    # parameters are on an accelerator; the capturable arithmetic runs on CPU tensors as well.
    # Each optimizer module imported its own reference to the check's device list
    from torch.optim import optimizer

    original = optimizer._get_capturable_supported_devices

    def devices(supports_xla: bool = True) -> list[str]:
        return [*original(supports_xla), "cpu"]

    for module in holders(original):
        replace(module, original.__name__, like(original, devices), feature="rehearse")


def install() -> None:
    """Apply every patch of this module."""
    _capturable_optimizers()
    _compile()
    _device_mesh()
    _process_groups()
    _parallel()
    _sync_batchnorm()
    _amp()
    _load()
    _loader_and_default_device()
