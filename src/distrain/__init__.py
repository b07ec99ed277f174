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

from .cluster import ClusterEnvironment, detect_environment, strip_launcher_argv

if TYPE_CHECKING:
    from .context import Context, DistrainError, current, init
    from .nn import CPUSyncBatchNorm, convert_sync_batchnorm
    from .spawn import spawn

__version__ = "0.1.0"

# `python -m torch.distributed.launch` appends --local-rank=N to argv; remove it before the
# user's argparse sees it (ctx.local_rank has the value).
strip_launcher_argv()

_LAZY = {
    "init": "context",
    "Context": "context",
    "DistrainError": "context",
    "current": "context",
    "CPUSyncBatchNorm": "nn",
    "convert_sync_batchnorm": "nn",
    "spawn": "spawn",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'distrain' has no attribute {name!r}")


__all__ = [
    "CPUSyncBatchNorm",
    "ClusterEnvironment",
    "Context",
    "DistrainError",
    "__version__",
    "convert_sync_batchnorm",
    "current",
    "detect_environment",
    "init",
    "spawn",
]
