"""What a test leaves behind in the pytest process: environment variables, threads, a process group.

The suite's one autouse fixture (tests/conftest.py) starts every test from a launcher-free
environment and, afterwards, *fails* the test that leaked (Lightning's fixtures do the same):
a leaked ``RANK`` or process group silently changes what the next test in the same worker
tests.  The leak is still cleaned up, so one leaking test fails alone.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping

import pytest

#: variables a launcher (or distrain run) sets, which the code under test reads
LAUNCHER_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
    "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "KUBERNETES_SERVICE_HOST", "container",
    "SINGULARITY_CONTAINER", "APPTAINER_CONTAINER",
)  # fmt: skip
LAUNCHER_PREFIXES = ("TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "MPI_LOCAL", "SLURM_", "HOROVOD_",
                     "PET_", "JSM_NAMESPACE_", "LSB_")  # fmt: skip
#: distrain's own variables a test may need from the shell (conftest sets the device)
KEPT = frozenset({"DISTRAIN_DEVICE"})
#: variables torch writes once per process, for whichever test first reaches the code (inductor
#: caches its directory in the environment on the first compiled or fused-optimizer path): which
#: test that is depends on xdist's scheduling, so it is not that test's leak
TORCH_ONCE = frozenset({"TORCHINDUCTOR_CACHE_DIR"})
#: how long a thread a test started may take to end on its own after the test
THREAD_GRACE_S = 5.0


def scrub(environ: os._Environ[str]) -> None:
    """Remove every launcher variable (and distrain's own, but for KEPT) from `environ`."""
    for key in list(environ):
        launcher = key in LAUNCHER_VARS or key.startswith(LAUNCHER_PREFIXES)
        if launcher or (key.startswith("DISTRAIN_") and key not in KEPT):
            del environ[key]


def environment_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The variables added, removed or changed between two environment copies (pytest's aside)."""
    changed = []
    for key in sorted(set(before) | set(after)):
        ignored = key == "PYTEST_CURRENT_TEST" or key in TORCH_ONCE
        if not ignored and before.get(key) != after.get(key):
            changed.append(f"{key}: {before.get(key)!r} -> {after.get(key)!r}")
    return changed


def new_threads(before: set[int]) -> list[threading.Thread]:
    """Threads alive now that were not at the test's start, after a short grace to end."""
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        alive = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def process_group_left() -> bool:
    """True when torch.distributed's default group is still initialised (and destroy it)."""
    if "torch.distributed" not in sys.modules:  # never imported: nothing to leak
        return False
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        return True
    return False


def guard() -> Iterator[None]:
    """The body of the autouse fixture: scrub, run the test, then clean up and fail on a leak."""
    scrub(os.environ)
    environ, threads = dict(os.environ), {t.ident for t in threading.enumerate()}
    yield
    changed = environment_changes(environ, os.environ)
    os.environ.clear()
    os.environ.update(environ)
    alive = new_threads(threads)
    group = process_group_left()
    found = [f"environment: {', '.join(changed)}"] if changed else []
    found += [f"threads still running: {', '.join(t.name for t in alive)}"] if alive else []
    found += ["torch.distributed's default process group still initialised"] if group else []
    if found:
        pytest.fail("the test leaked " + "; ".join(found), pytrace=False)
