"""Python, torch and the build torch was made with: CUDA, cuDNN, NCCL, backends, CPU capability."""

from __future__ import annotations

import platform
import sys
from typing import Any

from distrain.tools.doctor.check import Check, Status

GROUP = "torch"


def _cudnn_text(raw: int | None) -> str | None:
    """cuDNN's integer version as text: 92400 → '9.24.0' (cuDNN 9+), 8902 → '8.9.2' (cuDNN 8)."""
    if raw is None:
        return None
    if raw >= 10000:
        return f"{raw // 10000}.{raw % 10000 // 100}.{raw % 100}"
    return f"{raw // 1000}.{raw % 1000 // 100}.{raw % 100}"


def build_info() -> dict[str, Any]:
    """The versions and build flags of this interpreter's torch (also the rank fingerprint)."""
    import torch
    import torch.distributed as dist

    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
            cudnn = _cudnn_text(torch.backends.cudnn.version())
    except Exception:  # a CUDA build without a driver may still refuse to load libcudnn
        cudnn = None
    nccl = None
    try:
        if dist.is_available() and dist.is_nccl_available():
            nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:
        nccl = None
    backends = [
        name
        for name, ok in (
            ("gloo", dist.is_available() and dist.is_gloo_available()),
            ("nccl", dist.is_available() and dist.is_nccl_available()),
            ("mpi", dist.is_available() and dist.is_mpi_available()),
        )
        if ok
    ]
    try:
        cpu_capability = torch.backends.cpu.get_cpu_capability()
    except Exception:
        cpu_capability = None
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "nccl": nccl,
        "backends": backends,
        "cpu_capability": cpu_capability,
        "arch_list": list(torch.cuda.get_arch_list()) if torch.version.cuda else [],
    }


def probe() -> list[Check]:
    """Checks for the Python interpreter, torch's version and build, and its backends."""
    info = build_info()
    checks: list[Check] = []
    py_ok = sys.version_info >= (3, 10)
    checks.append(
        Check(
            "python.version",
            GROUP,
            "Python",
            "ok" if py_ok else "fail",
            f"{info['python_implementation']} {info['python']} on {info['platform']} "
            f"({sys.executable})",
            None if py_ok else "distrain needs Python >= 3.10; use a newer interpreter or venv.",
            {"version": info["python"], "executable": sys.executable},
        )
    )
    if info["cuda"]:
        build = (
            f"CUDA {info['cuda']} build, cuDNN {info['cudnn'] or 'not loadable'}, NCCL "
            f"{info['nccl'] or 'absent'}"
        )
    elif info["hip"]:
        build = f"ROCm/HIP {info['hip']} build"
    else:
        build = "CPU-only build"
    checks.append(
        Check(
            "torch.build",
            GROUP,
            "torch",
            "ok",
            f"torch {info['torch']} ({build}); CPU capability {info['cpu_capability']}",
            None,
            info,
        )
    )
    backends = info["backends"]
    status: Status
    if "gloo" in backends:
        status, fix = "ok", None
    elif backends:
        status, fix = (
            "warn",
            "gloo is missing: CPU training and the doctor's checks need it; reinstall torch "
            "from pytorch.org.",
        )
    else:
        status, fix = (
            "fail",
            "torch.distributed is unavailable in this build; install an official torch wheel.",
        )
    checks.append(
        Check(
            "torch.backends",
            GROUP,
            "distributed backends",
            status,
            ", ".join(backends) or "none",
            fix,
            {"backends": backends},
        )
    )
    return checks
