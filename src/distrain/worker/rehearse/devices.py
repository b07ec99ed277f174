"""CUDA devices land on the CPU: wrappers of the torch functions that take a device.

A CUDA device given as a string (``"cuda:1"``), a :class:`torch.device` or an index
(``.to(0)``, ``device=0``) to a factory function (every ``torch.*`` whose aten schema has a
``device`` argument: ``zeros``, ``randn``, ``tensor``, ``arange``, ...), to ``Tensor.to``,
``.cuda()``, ``.new_*`` and therefore to ``Module.to``/``.cuda()`` and ``nn.Linear(...,
device=)``, becomes the CPU.  Only these calls are wrapped: every other op runs untouched, at
full speed (a TorchFunctionMode would put a Python call in front of *every* op: measured here it
doubles the time of a small ``add``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from distrain.process.patching import replace, wrap

#: what the rehearsal mapped in this process: call → times (the end-of-job summary)
MAPPED: Counter[str] = Counter()

CPU = torch.device("cpu")
#: torch.* functions with a device argument that aten's schemas do not list
_EXTRA_FACTORIES = ("asarray",)


def is_cuda(device: object) -> bool:
    """True for a CUDA device named by string, torch.device or (bare) index."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return isinstance(device, int) and not isinstance(device, bool)


def cpu_if_cuda(device: Any, what: str) -> Any:
    """`device`, or the CPU when it names a CUDA device (counted under `what`)."""
    if device is not None and is_cuda(device):
        MAPPED[what] += 1
        return CPU
    return device


def factory_names() -> list[str]:
    """Public torch functions that take a ``device`` argument, read from aten's schemas."""
    names = list(_EXTRA_FACTORIES)
    for name in dir(torch._C._VariableFunctions):
        if name.startswith("_") or not hasattr(torch, name):
            continue
        try:
            schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
        except RuntimeError:
            continue
        if any(arg.name == "device" for schema in schemas for arg in schema.arguments):
            names.append(name)
    return names


def _with_cpu_device(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            device = kwargs.get("device")
            if device is not None and is_cuda(device):
                MAPPED[label] += 1
                kwargs["device"] = CPU
        return fn(*args, **kwargs)

    return call


def _tensor_to(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        # to(device[, dtype], ...), to(dtype, ...), to(other, ...): only the first argument may
        # be a device, and an int there is a CUDA index (x.to(local_rank))
        if args and is_cuda(args[0]):
            MAPPED[".to(cuda)"] += 1
            args = (CPU, *args[1:])
        elif kwargs:
            device = kwargs.get("device")
            if device is not None and is_cuda(device):
                MAPPED[".to(cuda)"] += 1
                kwargs["device"] = CPU
        return original(self, *args, **kwargs)

    return to


def _cuda_method(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    """Tensor/Storage .cuda(): already where it belongs."""
    MAPPED[".cuda()"] += 1
    return self


def _storage_cuda(self: Any, device: Any = None, non_blocking: bool = False) -> Any:
    """Storage .cuda(): already where it belongs."""
    MAPPED[".cuda()"] += 1
    return self


def _pin_memory(self: Any, device: Any = None) -> Any:
    """Tensor/Storage .pin_memory(): no pinned memory without a GPU."""
    MAPPED["pin_memory()"] += 1
    return self


def _tensor_type(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def type(
        self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any
    ) -> Any:
        if isinstance(dtype, str) and dtype.startswith(
            "torch.cuda."
        ):  # x.type("torch.cuda.HalfTensor")
            MAPPED[".type(torch.cuda.*Tensor)"] += 1
            dtype = "torch." + dtype[len("torch.cuda.") :]
        elif dtype is not None and not isinstance(dtype, str) and dtype.__module__ == "torch.cuda":
            dtype = getattr(torch, dtype.__name__)  # a torch.cuda.FloatTensor saved before install
        return (
            original(self, dtype, non_blocking, **kwargs) if dtype is not None else original(self)
        )

    return type


class _AnyGenerator(type(torch.Generator)):  # type: ignore[misc]
    """isinstance/issubclass against the stand-in ``torch.Generator`` answer for torch's class."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _TorchGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _TorchGenerator)


_TorchGenerator = torch.Generator


class _Generator(_TorchGenerator, metaclass=_AnyGenerator):
    """``torch.Generator(device="cuda")``: a CPU generator (torch's class; this only maps)."""

    def __new__(cls, device: Any = "cpu") -> Any:  # noqa: D102
        return _TorchGenerator(cpu_if_cuda(device, "Generator(device=cuda)"))


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    """Tensor.record_stream(s): streams are no-ops."""


def install() -> None:
    """Wrap the factory functions and the tensor methods that take a device."""
    for name in factory_names():
        replace(
            torch,
            name,
            _with_cpu_device(getattr(torch, name), "device=cuda"),
            forwards=True,
            feature="rehearse",
        )
    for name in (
        "new_empty",
        "new_empty_strided",
        "new_full",
        "new_ones",
        "new_zeros",
        "new_tensor",
    ):
        replace(
            torch.Tensor,
            name,
            _with_cpu_device(getattr(torch.Tensor, name), "device=cuda"),
            forwards=True,
            feature="rehearse",
        )
    wrap(torch.Tensor, "to", _tensor_to, feature="rehearse")
    wrap(torch.Tensor, "type", _tensor_type, feature="rehearse")
    replace(torch, "Generator", _Generator, feature="rehearse")
    for cls in (torch.Tensor, torch.UntypedStorage, torch.TypedStorage):
        replace(
            cls, "cuda", _cuda_method if cls is torch.Tensor else _storage_cuda, feature="rehearse"
        )
        replace(cls, "pin_memory", _pin_memory, feature="rehearse")
    replace(torch.Tensor, "record_stream", _record_stream, feature="rehearse")

    def default_device(original: Callable[..., Any]) -> Callable[..., Any]:
        def set_default_device(device: Any) -> None:
            original(cpu_if_cuda(device, "set_default_device(cuda)"))

        return set_default_device

    wrap(torch, "set_default_device", default_device, feature="rehearse")
