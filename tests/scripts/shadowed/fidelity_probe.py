"""What a training script sees of its launcher: written by every rank as JSON, to compare launchers.

Run beside its own ``yaml/`` package (PyYAML is installed too).  Each rank forms a gloo group
(so torch installs its exception hook, as in any real script) and writes
``$DTEST_PROBE_DIR/rank<R>.json``: ranks, argv, sys.path, cwd, the file of every imported
top-level package, the environment, the start method, signal dispositions and sys.excepthook.
tests/jobs/test_fidelity_probe.py compares torchrun's record with `distrain run`'s.
"""

import json
import multiprocessing
import os
import signal
import sys

import torch
import torch.distributed as dist
import yaml


def _name(handler: object) -> str:
    """A signal handler or hook by name: SIG_DFL, SIG_IGN, None or module.qualname."""
    if handler in (signal.SIG_DFL, signal.SIG_IGN):
        return signal.Handlers(handler).name
    if handler is None or isinstance(handler, int):
        return str(handler)
    return (
        f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"
    )


def record() -> dict:
    """Everything the comparison looks at, for this process."""
    modules = {}
    for name, module in list(sys.modules.items()):
        if "." not in name and getattr(module, "__file__", None):
            modules[name] = os.path.abspath(module.__file__)
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "argv": sys.argv,
        "path": sys.path,
        "cwd": os.getcwd(),
        "modules": modules,
        "env": dict(os.environ),
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "signals": {
            s.name: _name(signal.getsignal(s))
            for s in sorted(signal.valid_signals())
            if isinstance(s, signal.Signals)
        },
        "excepthook": _name(sys.excepthook),
        # a wrapper (functools.wraps keeps the name): distrain's atomic save under fast start
        "torch_save_wrapped": hasattr(torch.save, "__wrapped__"),
        "yaml_marker": getattr(yaml, "SHADOW_MARKER", None),
    }


dist.init_process_group("gloo")
out = os.path.join(os.environ["DTEST_PROBE_DIR"], f"rank{dist.get_rank()}.json")
with open(out, "w") as f:
    json.dump(record(), f, indent=1, sort_keys=True)
dist.barrier()
dist.destroy_process_group()
