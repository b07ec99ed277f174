"""distrain: one training script, any number of processes, GPUs and machines.

    ctx = distrain.init()
    model = ctx.prepare_model(model)
    loader = ctx.prepare_loader(train_set, batch_size=64)
"""

from __future__ import annotations

from .cluster import ClusterEnvironment, detect_environment, strip_launcher_argv
from .context import Context, DistrainError, current, init
from .nn import CPUSyncBatchNorm, convert_sync_batchnorm
from .spawn import spawn

__version__ = "0.1.0"

# `python -m torch.distributed.launch` appends --local-rank=N to argv; remove it before the
# user's argparse sees it (ctx.local_rank has the value).
strip_launcher_argv()

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
