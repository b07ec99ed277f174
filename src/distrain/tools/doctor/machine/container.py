"""Containers: which runtime (docker, podman, Kubernetes, LXC, …) and whether /dev/shm is big
enough for DataLoader workers (docker's default 64 MiB gives the famous "Bus error")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from distrain.tools.doctor.check import Check

GROUP = "container"
#: override the shared-memory path checked (tests point it at a small tmpfs)
SHM_ENV = "DISTRAIN_SHM_PATH"
SHM_FAIL_BYTES = 256 * 2**20
SHM_WARN_BYTES = 1 * 2**30

_CGROUP_MARKERS = (
    ("kubepods", "kubernetes"),
    ("docker", "docker"),
    ("libpod", "podman"),
    ("containerd", "containerd"),
    ("lxc", "lxc"),
    ("crio", "cri-o"),
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def detect_container() -> dict[str, Any]:
    """Container runtime evidence: ``{"runtime": name or None, "evidence": [..]}``."""
    evidence: list[str] = []
    runtime: str | None = None
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        evidence.append("KUBERNETES_SERVICE_HOST is set")
        runtime = "kubernetes"
    if os.path.exists("/.dockerenv"):
        evidence.append("/.dockerenv exists")
        runtime = runtime or "docker"
    if os.path.exists("/run/.containerenv"):
        evidence.append("/run/.containerenv exists")
        runtime = runtime or "podman"
    env_container = os.environ.get("container")  # set by podman, systemd-nspawn, LXC images
    if env_container:
        evidence.append(f"container={env_container}")
        runtime = runtime or env_container
    cgroup = _read("/proc/1/cgroup")
    for marker, name in _CGROUP_MARKERS:
        if marker in cgroup:
            evidence.append(f"/proc/1/cgroup mentions {marker}")
            runtime = runtime or name
            break
    if os.environ.get("SINGULARITY_CONTAINER") or os.environ.get("APPTAINER_CONTAINER"):
        evidence.append("SINGULARITY/APPTAINER_CONTAINER is set")
        runtime = runtime or "apptainer"
    return {"runtime": runtime, "evidence": evidence}


def shm_path() -> str:
    """The shared-memory mount to check: $DISTRAIN_SHM_PATH or /dev/shm."""
    return os.environ.get(SHM_ENV) or "/dev/shm"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def probe_shm(runtime: str | None) -> Check:
    """The size of /dev/shm, with the docker/Kubernetes fix when it is small."""
    path = shm_path()
    fix_small = (
        "docker run --ipc=host (or --shm-size=8g); Kubernetes: mount an emptyDir {medium: Memory} "
        "at /dev/shm; or use DataLoader(num_workers=0)."
    )
    try:
        st = os.statvfs(path)
    except OSError as err:
        return Check(
            "container.shm",
            GROUP,
            "shared memory",
            "warn",
            f"{path}: {err.strerror}",
            fix_small,
            {"path": path, "size_bytes": None},
        )
    size = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    data = {"path": path, "size_bytes": size, "free_bytes": free}
    seen = f"{path}: {_mib(size)} ({_mib(free)} free)"
    if size < SHM_FAIL_BYTES:
        return Check(
            "container.shm",
            GROUP,
            "shared memory",
            "fail",
            seen + ": DataLoader workers will die with 'Bus error'",
            fix_small,
            data,
        )
    if size < SHM_WARN_BYTES or free < SHM_FAIL_BYTES:
        return Check(
            "container.shm",
            GROUP,
            "shared memory",
            "warn",
            seen + ": small for multi-worker loading",
            fix_small,
            data,
        )
    return Check("container.shm", GROUP, "shared memory", "ok", seen, None, data)


def probe() -> tuple[list[Check], dict[str, Any]]:
    """Container detection and /dev/shm; also returns the detection for the GPU hint."""
    found = detect_container()
    runtime = found["runtime"]
    seen = (
        f"{runtime} ({'; '.join(found['evidence'])})"
        if runtime
        else "none detected (bare metal or VM)"
    )
    checks = [
        Check("container.runtime", GROUP, "container", "info", seen, None, found),
        probe_shm(runtime),
    ]
    return checks, found
