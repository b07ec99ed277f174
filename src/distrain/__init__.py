"""distrain: one training script, any number of processes, GPUs and machines.

    ctx = distrain.init()
    model = ctx.prepare_model(model)
    loader = ctx.prepare_loader(train_set, batch_size=64)

Importing the package is cheap: torch is imported on first use of ``init``, ``Context`` & co.,
so ``distrain top``/``export``/``--help`` start without paying for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from distrain.cluster import ClusterEnvironment, detect_environment, strip_launcher_argv
from distrain.errors import DistrainError

# the one place the version is written: pyproject.toml reads it (tool.setuptools.dynamic)
__version__ = "0.1.0"

# `python -m torch.distributed.launch` appends --local-rank=N to argv; remove it before the user's
# argparse sees it (ctx.local_rank has the value).  (worker/fast_start/forked.py repeats this in
# workers forked from a server that imported distrain before the worker's argv existed.)
strip_launcher_argv()

# The torch-importing parts load on first use (PEP 562): `distrain run` must be able to start
# its preloading fork server before this process pays for `import torch`
# (launch/fast_start/forkserver.py).
# `spawn` too: a worker that `distrain run` or torchrun started never calls it.
_LAZY: dict[str, str] = {
    "spawn": "distrain.launch.spawn",
    "Context": "distrain.worker.context",
    "current": "distrain.worker.context",
    "init": "distrain.worker.init",
    "CPUSyncBatchNorm": "distrain.parallel.batchnorm",
    "convert_sync_batchnorm": "distrain.parallel.batchnorm",
    "DDP": "distrain.parallel.options",
    "FSDP": "distrain.parallel.options",
    "HSDP": "distrain.parallel.options",
    "Strategy": "distrain.parallel.options",
}

if TYPE_CHECKING:
    from distrain.launch.spawn import spawn
    from distrain.parallel.batchnorm import CPUSyncBatchNorm, convert_sync_batchnorm
    from distrain.parallel.options import DDP, FSDP, HSDP, Strategy
    from distrain.worker.context import Context, current
    from distrain.worker.init import init


def __getattr__(name: str) -> Any:
    """Import a torch-dependent name on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'distrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DDP",
    "FSDP",
    "HSDP",
    "CPUSyncBatchNorm",
    "ClusterEnvironment",
    "Context",
    "DistrainError",
    "Strategy",
    "__version__",
    "convert_sync_batchnorm",
    "current",
    "detect_environment",
    "init",
    "spawn",
]
