"""What a script sees of its launcher, as one JSON-able record (the fidelity probes' shared part).

Imports no torch (fidelity_no_torch.py must stay torch-free): torch's parts are read only when the
script imported it.
"""

import faulthandler
import json
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import tempfile


def _name(handler: object) -> str:
    """A signal handler or hook by name: SIG_DFL, SIG_IGN, None or module.qualname."""
    if handler in (signal.SIG_DFL, signal.SIG_IGN):
        return signal.Handlers(handler).name
    if handler is None or isinstance(handler, int):
        return str(handler)
    return (
        f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"
    )


def _beside_after_chdir(script_file: str) -> bool:
    """What a script that chdirs and then finds its files through ``__file__`` finds."""
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        return os.path.isfile(os.path.join(os.path.dirname(script_file), "probe_record.py"))
    finally:
        os.chdir(cwd)


def record(rank: int, world_size: int, script_file: str) -> dict:
    """Everything the comparison looks at, for this process."""
    modules = {}
    for name, module in list(sys.modules.items()):
        if "." not in name and getattr(module, "__file__", None):
            modules[name] = os.path.abspath(module.__file__)
    torch = sys.modules.get("torch")
    main = sys.modules["__main__"]
    yaml = sys.modules.get("yaml")
    return {
        "rank": rank,
        "world_size": world_size,
        "argv": sys.argv,
        "path": sys.path,
        "cwd": os.getcwd(),
        "file": script_file,
        "main_file": getattr(main, "__file__", None),
        "finds_its_files_after_chdir": _beside_after_chdir(script_file),
        "modules": modules,
        "torch_imported": torch is not None,
        "env": dict(os.environ),
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "signals": {
            s.name: _name(signal.getsignal(s))
            for s in sorted(signal.valid_signals())
            if isinstance(s, signal.Signals)
        },
        "blocked_signals": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "faulthandler_enabled": faulthandler.is_enabled(),
        "excepthook": _name(sys.excepthook),
        # the launcher's swap while it forks the fork server must not reach the workers: their
        # own fork server (a DataLoader's, the script's) is a fresh interpreter, as torchrun's
        "spawnv_passfds": _name(multiprocessing.util.spawnv_passfds),
        "dynamo_log_level": logging.getLogger("torch._dynamo").getEffectiveLevel(),
        # a wrapper (functools.wraps keeps the name): distrain's atomic save under fast start
        "torch_save_wrapped": torch is not None and hasattr(torch.save, "__wrapped__"),
        "yaml_marker": getattr(yaml, "SHADOW_MARKER", None),
    }


def write(info: dict) -> None:
    """Write this rank's record where the test reads it."""
    out = os.path.join(os.environ["DTEST_PROBE_DIR"], f"rank{info['rank']}.json")
    with open(out, "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
