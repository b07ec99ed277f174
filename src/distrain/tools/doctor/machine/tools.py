"""Optional tools: present or not (none of them is required)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

from distrain.tools.doctor.check import Check

GROUP = "tools"
#: name → (executable, python module, what it is for)
TOOLS: dict[str, tuple[str | None, str | None, str]] = {
    "mpirun": ("mpirun", "mpi4py", "launching with mpirun (Open MPI / MPICH)"),
    "horovod": ("horovodrun", "horovod", "horovodrun"),
    "etcd": ("etcd", "etcd", "torchrun --rdzv-backend etcd (python-etcd)"),
    "tensorboard": ("tensorboard", "tensorboard", "training curves"),
}


def _version(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=2.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0][:80] if lines else None


def probe() -> list[Check]:
    """One info check per optional tool: executable path, version line, python module."""
    checks = []
    for name, (exe, module, purpose) in TOOLS.items():
        path = shutil.which(exe) if exe else None
        has_module = bool(module and importlib.util.find_spec(module))
        version = _version(path) if path and name in ("mpirun", "etcd") else None
        if path or has_module:
            parts = [
                p for p in (path, version, f"python module {module}" if has_module else None) if p
            ]
            seen = "; ".join(parts)
        else:
            seen = f"not installed (only needed for {purpose})"
        checks.append(
            Check(
                f"tools.{name}",
                GROUP,
                name,
                "info",
                seen,
                None,
                {"path": path, "version": version, "module": module if has_module else None},
            )
        )
    return checks
