"""Process limits (open files, locked memory) and CPU threads vs cores."""

from __future__ import annotations

import os
import resource

from distrain.process.cores import usable_cores
from distrain.tools.doctor.check import Check

GROUP = "limits"
NOFILE_MIN = 4096  # gloo/NCCL open sockets per peer and DataLoader workers share file descriptors


def _fmt(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def probe(has_gpu: bool = False) -> list[Check]:
    """RLIMIT_NOFILE, RLIMIT_MEMLOCK and OMP_NUM_THREADS against the usable cores."""
    return [_open_files(), _locked_memory(has_gpu), _threads()]


def _open_files() -> Check:
    """RLIMIT_NOFILE against what many ranks' sockets and loader workers need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    data = {"soft": soft, "hard": hard}
    if soft != resource.RLIM_INFINITY and soft < NOFILE_MIN:
        return Check(
            "limits.nofile",
            GROUP,
            "open files",
            "warn",
            f"soft {_fmt(soft)}, hard {_fmt(hard)} (< {NOFILE_MIN})",
            "ulimit -n 65536 (docker: --ulimit nofile=65536:65536); many ranks/workers run "
            "out of descriptors.",
            data,
        )
    else:
        return Check(
            "limits.nofile",
            GROUP,
            "open files",
            "ok",
            f"soft {_fmt(soft)}, hard {_fmt(hard)}",
            None,
            data,
        )


def _locked_memory(has_gpu: bool) -> Check:
    """RLIMIT_MEMLOCK where NCCL would pin memory (InfiniBand/RDMA or a GPU)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    data = {"soft": soft, "hard": hard}
    rdma = os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))
    seen = f"soft {_fmt(soft) if soft == resource.RLIM_INFINITY else f'{soft // 1024} KiB'}"
    if soft != resource.RLIM_INFINITY and (rdma or has_gpu):
        return Check(
            "limits.memlock",
            GROUP,
            "locked memory",
            "warn",
            seen + (" with InfiniBand/RDMA devices" if rdma else " on a GPU machine"),
            "ulimit -l unlimited (docker: --ulimit memlock=-1); NCCL over InfiniBand "
            "needs to pin memory.",
            data,
        )
    else:
        return Check(
            "limits.memlock",
            GROUP,
            "locked memory",
            "ok",
            seen + (" (no RDMA devices)" if not rdma else ""),
            None,
            data,
        )


def _threads() -> Check:
    """OMP_NUM_THREADS times the local processes against the usable cores."""
    cores = usable_cores()
    raw = os.environ.get("OMP_NUM_THREADS")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    data2: dict[str, object] = {
        "omp_num_threads": raw,
        "usable_cores": cores,
        "local_world_size": local,
    }
    if raw is None:
        return Check(
            "limits.threads",
            GROUP,
            "threads",
            "ok",
            f"OMP_NUM_THREADS unset; {cores} usable core(s)",
            None,
            data2,
        )
    elif not raw.isdigit() or int(raw) < 1:
        return Check(
            "limits.threads",
            GROUP,
            "threads",
            "warn",
            f"OMP_NUM_THREADS={raw!r} is not a positive integer",
            "Unset it or set a positive integer (distrain run sets cores / processes).",
            data2,
        )
    elif int(raw) * local > cores:
        return Check(
            "limits.threads",
            GROUP,
            "threads",
            "warn",
            f"OMP_NUM_THREADS={raw} x {local} local process(es) > {cores} usable "
            "core(s): oversubscribed",
            f"Set OMP_NUM_THREADS={max(1, cores // local)} or leave it unset under distrain run.",
            data2,
        )
    else:
        return Check(
            "limits.threads",
            GROUP,
            "threads",
            "ok",
            f"OMP_NUM_THREADS={raw} x {local} local process(es), {cores} usable core(s)",
            None,
            data2,
        )
