"""GPUs: NVML's view (driver, memory, capability, utilisation, processes), torch's view, and
whether they agree with each other, with CUDA_VISIBLE_DEVICES, and with torch's build."""

from __future__ import annotations

import glob
import os
from typing import Any, Literal

from distrain.tools.doctor.bounded import ProbeTimeout, call_bounded
from distrain.tools.doctor.check import Check, Status
from distrain.tools.doctor.machine.compat import check_arch, check_driver

GROUP = "gpu"
#: NVML talks to the kernel driver; a wedged driver can block it for minutes
NVML_TIMEOUT_S = 3.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _process_name(pid: int) -> str | None:
    """The name of `pid`, when it lives in this PID namespace (not in another container)."""
    import psutil

    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


def _nvml_read() -> dict[str, Any]:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return {"state": "no_driver", "error": "NVML library (libnvidia-ml.so) not found"}
    except pynvml.NVMLError as err:
        return {"state": "error", "error": f"nvmlInit failed: {err}"}
    try:
        out: dict[str, Any] = {
            "state": "ok",
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "gpus": [],
        }
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            out["driver_cuda"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        except pynvml.NVMLError:
            out["driver_cuda"] = None
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpu: dict[str, Any] = {
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "memory_total_mib": mem.total // 2**20,
                "memory_used_mib": mem.used // 2**20,
            }
            try:
                gpu["capability"] = list(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
            except pynvml.NVMLError:
                gpu["capability"] = None
            try:
                gpu["utilization_pct"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            except pynvml.NVMLError:
                gpu["utilization_pct"] = None
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                gpu["processes"] = [
                    {
                        "pid": p.pid,
                        "name": _process_name(p.pid),
                        "used_mib": (p.usedGpuMemory or 0) // 2**20,
                    }
                    for p in procs
                ]
            except pynvml.NVMLError:
                gpu["processes"] = []
            out["gpus"].append(gpu)
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def nvml_snapshot(timeout: float = NVML_TIMEOUT_S) -> dict[str, Any]:
    """NVML's view of the machine; ``state`` is ok, no_driver, error or timeout (never raises)."""
    try:
        return call_bounded(_nvml_read, timeout)
    except ProbeTimeout as err:
        return {"state": "timeout", "error": f"NVML {err} (wedged driver?)"}
    except ImportError:
        return {
            "state": "error",
            "error": "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
        }
    except Exception as err:
        return {"state": "error", "error": f"{type(err).__name__}: {err}"}


def visible_devices(count: int) -> tuple[list[int] | None, str | None]:
    """Indices CUDA_VISIBLE_DEVICES selects of `count` GPUs (None: unset), and a problem if any."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None, None
    tokens = [t.strip() for t in raw.split(",")]
    if raw.strip() == "":
        return [], "CUDA_VISIBLE_DEVICES is set but empty: torch will see no GPU"
    picked: list[int] = []
    for tok in tokens:
        if tok.startswith(("GPU-", "MIG-")):
            continue  # UUIDs are valid; they are not checked against indices here
        if not tok.isdigit():
            return (
                picked,
                f"CUDA_VISIBLE_DEVICES={raw!r}: {tok!r} is not an index or UUID (CUDA stops at it)",
            )
        if int(tok) >= count:
            return (
                picked,
                f"CUDA_VISIBLE_DEVICES={raw!r}: GPU {tok} does not exist ({count} present; "
                "CUDA stops at it)",
            )
        if int(tok) in picked:
            return picked, f"CUDA_VISIBLE_DEVICES={raw!r} names GPU {tok} twice"
        picked.append(int(tok))
    return picked, None


def gpu_expected(expect_gpu: bool) -> tuple[Literal["warn", "fail"] | None, str]:
    """How strongly this machine is meant to have a GPU ("fail", "warn" or None), and why.

    --expect-gpu and NVIDIA_VISIBLE_DEVICES (set by NVIDIA's container images) are strong
    signs; a non-empty CUDA_VISIBLE_DEVICES is a weaker one (often copied between machines).
    """
    if expect_gpu:
        return "fail", "--expect-gpu was given"
    nv = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    if nv and nv not in ("void", "none"):
        return "fail", f"NVIDIA_VISIBLE_DEVICES={nv}"
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip():
        return "warn", f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}"
    return None, ""


def probe(expect_gpu: bool = False, in_container: bool = False) -> list[Check]:
    """NVML, torch's CUDA view, their agreement, the driver and architecture compatibility."""
    import torch

    snap = nvml_snapshot()
    expected, why = gpu_expected(expect_gpu)
    torch_cuda = torch.version.cuda
    torch_avail = torch.cuda.is_available()
    torch_count = torch.cuda.device_count() if torch_avail else 0

    if snap["state"] != "ok":
        return _without_nvml(
            snap, expected, why, in_container, torch_cuda, torch_avail, torch_count
        )
    gpus = snap["gpus"]
    visible, want = _visible_devices(len(gpus))
    checks = [_nvml_gpus(snap), visible]
    if not torch_cuda:
        checks.append(
            Check(
                "gpu.torch",
                GROUP,
                "torch's view",
                "fail",
                f"{len(gpus)} GPU(s) present but torch {torch.__version__} is a CPU-only build",
                "Install a CUDA build of torch: pip install torch --index-url "
                "https://download.pytorch.org/whl/cu128 (pick your CUDA).",
                {"available": False, "count": 0},
            )
        )
        return checks
    return checks + _torch_against_nvml(snap, want, torch_cuda, torch_avail, torch_count)


def _without_nvml(
    snap: dict[str, Any],
    expected: Literal["warn", "fail"] | None,
    why: str,
    in_container: bool,
    torch_cuda: str | None,
    torch_avail: bool,
    torch_count: int,
) -> list[Check]:
    """NVML did not answer: whether a GPU was expected, and what torch sees without it."""
    checks: list[Check] = []
    devices = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if devices and snap["state"] == "no_driver":  # device nodes passed in, driver libraries not
        expected, why = "fail", f"{', '.join(devices)} exist"
    status: Status
    if expected:
        status = expected
        fix = (
            "In a container: docker run --gpus all (needs "
            "nvidia-container-toolkit on the host); "
            "on Kubernetes request nvidia.com/gpu."
            if in_container
            else "Install the NVIDIA driver (nvidia-smi must work), or unset the variable "
            "that asks for a GPU."
        )
    elif snap["state"] == "no_driver":
        status, fix = "ok", None
    else:
        status, fix = (
            "warn",
            "Check the NVIDIA driver: run nvidia-smi; reboot after a driver upgrade.",
        )
    seen = {"no_driver": "no GPU driver (NVML library not found)"}.get(
        snap["state"], snap.get("error", "")
    )
    seen += (
        f", but a GPU is expected ({why})"
        if expected
        else (": CPU-only machine" if snap["state"] == "no_driver" else "")
    )
    checks.append(Check("gpu.nvml", GROUP, "GPUs (NVML)", status, seen, fix, snap))
    if torch_cuda and in_container and not expected and snap["state"] == "no_driver":
        checks.append(
            Check(
                "gpu.container_hint",
                GROUP,
                "GPU in container",
                "info",
                f"torch is a CUDA {torch_cuda} build but this container has no GPU device",
                "If the host has GPUs: docker run --gpus all --ipc=host ... (needs "
                "nvidia-container-toolkit).",
                {"torch_cuda": torch_cuda},
            )
        )
    if torch_avail:  # torch sees a GPU NVML does not: unusual, report it
        checks.append(
            Check(
                "gpu.torch",
                GROUP,
                "torch's view",
                "warn",
                f"torch sees {torch_count} GPU(s) but NVML does not answer",
                "Check the driver with nvidia-smi.",
                {"available": torch_avail, "count": torch_count},
            )
        )
    return checks


def _nvml_gpus(snap: dict[str, Any]) -> Check:
    """The driver and each GPU NVML lists: memory, capability, utilisation, processes."""
    gpus = snap["gpus"]
    lines = [
        f"{g['index']}: {g['name']} {g['memory_total_mib']} MiB (used {g['memory_used_mib']}), cc "
        f"{'.'.join(map(str, g['capability'])) if g['capability'] else '?'}, util "
        f"{g['utilization_pct']}%, "
        f"{len(g['processes'])} process(es)"
        for g in gpus
    ]
    return Check(
        "gpu.nvml",
        GROUP,
        "GPUs (NVML)",
        "ok" if gpus else "warn",
        f"driver {snap['driver']} (CUDA <= {snap.get('driver_cuda')}); "
        + ("; ".join(lines) or "0 GPUs"),
        None
        if gpus
        else "The driver loads but lists no GPU: check nvidia-smi and the container's --gpus.",
        snap,
    )


def _visible_devices(count: int) -> tuple[Check, int]:
    """CUDA_VISIBLE_DEVICES against the `count` GPUs NVML lists, and how many it leaves visible."""
    picked, problem = visible_devices(count)
    want = count if picked is None else len(picked)
    check = Check(
        "gpu.visible_devices",
        GROUP,
        "CUDA_VISIBLE_DEVICES",
        "warn" if problem else "ok",
        problem
        or (f"unset: all {count} GPU(s) visible" if picked is None else f"selects GPU(s) {picked}"),
        "Use comma-separated indices below the GPU count, e.g. CUDA_VISIBLE_DEVICES=0,1 (or "
        "distrain run --gpus 0,1)."
        if problem
        else None,
        {"value": os.environ.get("CUDA_VISIBLE_DEVICES"), "selected": picked},
    )
    return check, want


def _torch_against_nvml(
    snap: dict[str, Any], want: int, torch_cuda: str, torch_avail: bool, torch_count: int
) -> list[Check]:
    """Whether torch sees the visible GPUs, its CUDA against the driver, each GPU's arch."""
    import torch

    gpus = snap["gpus"]
    checks: list[Check] = []
    agree = torch_count == want
    checks.append(
        Check(
            "gpu.torch",
            GROUP,
            "torch's view",
            "ok" if agree and torch_avail else "fail",
            f"torch.cuda.is_available()={torch_avail}, device_count={torch_count}; "
            f"NVML/visible: {want}",
            None
            if agree and torch_avail
            else "torch cannot use the GPUs NVML lists: check the driver version below and "
            "CUDA_VISIBLE_DEVICES.",
            {"available": torch_avail, "count": torch_count, "expected": want},
        )
    )
    verdict, seen, fix = check_driver(torch_cuda, snap["driver"])
    checks.append(
        Check(
            "gpu.driver",
            GROUP,
            "driver vs torch CUDA",
            verdict,
            seen,
            fix,
            {"driver": snap["driver"], "torch_cuda": torch_cuda},
        )
    )
    arch_list = list(torch.cuda.get_arch_list())
    for g in gpus:
        if not g["capability"]:
            continue
        v, why = check_arch((g["capability"][0], g["capability"][1]), arch_list)
        checks.append(
            Check(
                f"gpu.arch.{g['index']}",
                GROUP,
                f"GPU {g['index']} arch",
                v,
                f"{g['name']}: {why}",
                None
                if v == "ok"
                else "Install a torch build compiled for this GPU (newer wheel for new GPUs, "
                "older for old ones).",
                {"capability": g["capability"], "arch_list": arch_list},
            )
        )
    return checks
