"""What a CPU rehearsal cannot stand in for stops the job with one line naming the user's call.

Custom CUDA extensions, Triton kernels, CUDA graphs, NVML, FlexAttention's backward, GPU-only
attention kernels (``sdpa_kernel``) and ``torch.cuda.comm``'s copies between GPUs need a real
GPU.  The line names the call and the first frame of the user's own code (file:line), skipping
torch, triton, pynvml, distrain and the standard library; it is printed once per job (the first
rank to get there), and the process exits with code 3.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

from distrain.log import get_logger
from distrain.process.patching import like, replace, wrap
from distrain.settings import for_report
from distrain.worker.lifecycle.failure import write_error_message

_log = get_logger("rehearse")

PROG = "distrain run --cpu"
#: exit code of a job stopped because it uses something only a GPU can run
REFUSED_EXIT_CODE = 3

_NOT_USER = tuple(
    os.path.dirname(os.path.abspath(p)) + os.sep
    for p in (sysconfig.get_paths()["stdlib"] + "/x", os.path.dirname(__file__) + "/../../x")
)
_NOT_USER_PACKAGES = {"torch", "triton", "pynvml"}


def user_frame() -> str:
    """'file:line' of the innermost caller outside torch, triton, pynvml, distrain and the stdlib"""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        code_file = frame.f_code.co_filename
        if not (
            path.startswith(_NOT_USER)
            or code_file.startswith("<")
            or _NOT_USER_PACKAGES.intersection(path.split(os.sep))
        ):
            here = os.getcwd() + os.sep
            return f"{path[len(here) :] if path.startswith(here) else path}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def refuse(call: str) -> NoReturn:
    """Stop this process: `call` cannot run without a GPU (one line, once per job)."""
    where = user_frame()
    reason = f"cannot rehearse {call} at {where}: it needs a real GPU"
    if _first_to_say():
        _log.error(f"{PROG}: {reason}")
    # the agent's error file carries the reason, so the job's last line names it
    settings = for_report()
    error_file = settings.error_file
    if error_file and not os.path.exists(error_file):
        with contextlib.suppress(OSError):
            write_error_message(error_file, f"{PROG}: {reason}", "", settings)
    raise SystemExit(REFUSED_EXIT_CODE)


def say_once(key: str, line: str) -> None:
    """Log `line` once per job (the first process to get here): what a mapping costs, say."""
    if _first_to_say(key):
        _log.warning(f"{PROG}: {line}")


def _first_to_say(key: str = "refused") -> bool:
    """Whether this process is the job's first to claim `key` (a ``said-<key>`` file in the
    job's folder, made once: a claim between processes, not a report; docs/environment.md)."""
    folder = for_report().job_dir
    if not folder:
        return True
    try:
        path = os.path.join(folder, f"said-{key}")
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


# -- patch modules when (and only if) the script imports them -----------------------------------
class _AfterImport(importlib.abc.MetaPathFinder):
    """Run a patch right after a named module is imported (triton, pynvml, cpp_extension)."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = self.patches.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            self.patches.pop(name, None)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _triton(module: ModuleType) -> None:
    jit = importlib.import_module("triton.runtime.jit")

    def launch(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        name = getattr(self, "__name__", None) or getattr(
            getattr(self, "fn", None), "__name__", "?"
        )
        refuse(f"Triton kernel {name}")

    jit.KernelInterface.__getitem__ = lambda self, grid: lambda *a, **k: launch(self)
    jit.JITFunction.run = launch


def _pynvml(module: ModuleType) -> None:
    def init(*args: Any, **kwargs: Any) -> NoReturn:
        refuse("pynvml.nvmlInit() (NVML)")

    module.nvmlInit = init  # type: ignore[attr-defined]
    if hasattr(module, "nvmlInitWithFlags"):
        module.nvmlInitWithFlags = init  # type: ignore[attr-defined]


def _cpp_extension(module: ModuleType) -> None:
    def guard(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            sources = kwargs.get("sources", args[1] if len(args) > 1 else [])
            sources = [sources] if isinstance(sources, str) else list(sources or [])
            if (
                kwargs.get("cuda_sources")
                or kwargs.get("with_cuda")
                or any(str(s).endswith((".cu", ".cuh")) for s in sources)
            ):
                refuse(f"torch.utils.cpp_extension.{name}() of a CUDA extension")
            return original(*args, **kwargs)

        return call

    for name in ("load", "load_inline"):
        wrap(module, name, functools.partial(guard, name), feature="rehearse")

    def cuda_extension(name: Any, sources: Any, *args: Any, **kwargs: Any) -> NoReturn:
        refuse("torch.utils.cpp_extension.CUDAExtension (a custom CUDA extension)")

    replace(module, "CUDAExtension", cuda_extension, feature="rehearse")


def _flex_attention(module: ModuleType) -> None:
    # torch has no FlexAttention backward on the CPU: flex_attention() raises NotImplementedError
    # as soon as an input requires grad (torchtitan's training step), a traceback and exit code 1
    import torch

    # torchtitan compiles flex_attention: Dynamo must not trace the refusal (sys._getframe would
    # cost a graph-break warning of several lines before the one line)
    stop = torch.compiler.disable(refuse)

    def validate(original: Callable[..., None]) -> Callable[..., None]:
        def _validate_device(query: Any, key: Any, value: Any) -> None:
            if query.device.type == "cpu" and any(t.requires_grad for t in (query, key, value)):
                stop("FlexAttention backward (flex_attention on inputs that require grad)")
            original(query, key, value)

        return _validate_device

    if hasattr(module, "_validate_device"):  # a torch without it: its own error stays
        wrap(module, "_validate_device", validate, feature="rehearse")


#: the attention kernels a CPU has (scaled_dot_product_attention's math and CPU flash kernels)
_CPU_SDPA = ("MATH", "FLASH_ATTENTION")


def _attention_kernels(module: ModuleType) -> None:
    # sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION) (or CUDNN_ATTENTION) leaves the CPU no kernel:
    # the block's first scaled_dot_product_attention ends in "No viable backend".  Its setter is
    # wrapped, not sdpa_kernel itself: Dynamo recognises sdpa_kernel by identity while tracing
    def select(original: Callable[..., None]) -> Callable[..., None]:
        def _sdpa_kernel(backends: Any, set_priority: bool = False) -> None:
            names = [getattr(b, "name", str(b)) for b in backends]
            if not set(names) & set(_CPU_SDPA):
                refuse(f"sdpa_kernel({', '.join(names)}) (attention kernels only a GPU has)")
            original(backends, set_priority)

        return _sdpa_kernel

    if hasattr(module, "_sdpa_kernel"):
        wrap(module, "_sdpa_kernel", select, feature="rehearse")


def _cuda_comm(module: ModuleType) -> None:
    # torch.cuda.comm copies between GPUs through CUDA itself (no driver: a RuntimeError)
    def refusing(name: str) -> Callable[..., NoReturn]:
        def refused(*args: Any, **kwargs: Any) -> NoReturn:
            refuse(f"torch.cuda.comm.{name}() (copies between GPUs)")

        return like(getattr(module, name), refused)

    for name in module.__all__:
        replace(module, name, refusing(name), feature="rehearse")


def install() -> None:
    """Patch triton, pynvml, cpp_extension and flex_attention now or when they are imported."""
    patches: dict[str, Callable[[ModuleType], None]] = {
        "triton": _triton,
        "pynvml": _pynvml,
        "torch.utils.cpp_extension": _cpp_extension,
        "torch.nn.attention.flex_attention": _flex_attention,
        "torch.nn.attention": _attention_kernels,
        "torch.cuda.comm": _cuda_comm,
    }
    for name in list(patches):
        if name in sys.modules:
            patches.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(patches))
