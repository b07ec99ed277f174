"""Imported once by `distrain run`'s fork server before any fork (launch/fast_start/forkserver.py).

Every worker forked from the server starts with these modules already imported: torch, the
parts of torch.distributed a worker unpickles its target from, ``torch._dynamo`` (which the
first ``torch.optim`` optimizer imports lazily, ~1.5 s), distrain itself, and the script's own
top-level imports named in ``DISTRAIN_PRELOAD``.

Nothing here may start a Python thread or initialise CUDA: a forked child inherits neither
working threads nor a usable CUDA context.  If an import did either, :data:`UNSAFE` says so and
workers run in fresh interpreters instead.
"""

# Environment boundary (scripts/structure_metrics.py ENV_BOUNDARY): the fork server's own
# start: it snapshots the environment workers are rebuilt from, before any worker exists.
from __future__ import annotations

import importlib
import os
import signal
import threading

from distrain.contract import PRELOAD
from distrain.process.lineage import die_with_parent

#: the server's environment before any worker-specific change (workers rebuild theirs from it)
BASE_ENV: dict[str, str] = dict(os.environ)
#: why forking from this server is unsafe; empty when it is safe
UNSAFE = ""
#: preloads that failed to import: "module: error"
FAILED: list[str] = []
#: signals the server ignores: a scheduler signals every process of the job (SLURM's
#: time-limit warning, preemption), and a dead server would make the agent think every
#: worker had exited while they still write their checkpoint.  Workers restore the default.
SERVER_IGNORES = (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)
for _sig in SERVER_IGNORES:
    signal.signal(_sig, signal.SIG_IGN)
# the server outlives a SIGKILLed launcher otherwise: every worker holds its "alive" pipe open
die_with_parent()

_CORE = (
    # first: it finds argv through `environ`, which importing torch may reallocate (start/title.py)
    "distrain.worker.start.title",
    "torch",
    "torch.nn",
    "torch.optim",
    "torch._dynamo",
    "torch.distributed",
    "torch.distributed.elastic.multiprocessing.api",
    "torch.multiprocessing",
    "distrain",
    "distrain.worker.init",
    # what `ctx.prepare_model` imports on its first call (a DDP model's; FSDP's code is imported
    # by the workers that shard, not by every worker of the server)
    "distrain.parallel",
    "distrain.worker.fast_start.forked",
)


def _preload(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except (Exception, SystemExit) as err:  # a user module's failure must not kill the server
            FAILED.append(f"{name}: {type(err).__name__}: {err}")


_preload(list(_CORE) + [n for n in os.environ.get(PRELOAD, "").split(",") if n])
#: variables the preloaded imports set themselves (torch._inductor's TORCHINDUCTOR_CACHE_DIR): a
#: fresh interpreter has them only once it imports those modules, so workers do not inherit them
SET_BY_PRELOAD: frozenset[str] = frozenset(k for k, v in os.environ.items() if BASE_ENV.get(k) != v)

if threading.active_count() > 1:
    UNSAFE = "a preloaded module started a thread: " + ", ".join(
        t.name for t in threading.enumerate()
    )
else:
    try:
        import torch

        if torch.cuda.is_initialized():
            UNSAFE = "a preloaded module initialised CUDA"
    except Exception:  # torch itself failed to import: nothing can be forked
        UNSAFE = "torch could not be imported in the fork server"
