"""Driver ↔ CUDA and GPU ↔ torch-build compatibility: maintained tables and pure rules.

Source of :data:`MIN_DRIVER`: NVIDIA CUDA Toolkit Release Notes, table 3 "CUDA Toolkit and
Corresponding Driver Versions" (Linux x86_64 column, the GA release of each minor version;
https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html).  Source of
:data:`MINOR_COMPAT_DRIVER`: the same notes' "minimum required driver for CUDA minor version
compatibility" (and https://docs.nvidia.com/deploy/cuda-compatibility/): CUDA 11.x >= 450.80.02,
12.x >= 525.60.13, 13.x >= 580.  Add a row here when a new CUDA minor version ships.
"""

from __future__ import annotations

from typing import Literal

Verdict = Literal["ok", "warn", "fail"]

#: CUDA major.minor → minimum Linux x86_64 driver of that toolkit's GA release (table 3)
MIN_DRIVER: dict[str, str] = {
    "11.0": "450.51.05",
    "11.1": "455.23",
    "11.2": "460.27.03",
    "11.3": "465.19.01",
    "11.4": "470.42.01",
    "11.5": "495.29.05",
    "11.6": "510.39.01",
    "11.7": "515.43.04",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}

#: CUDA major → the oldest driver that runs it through minor version compatibility
MINOR_COMPAT_DRIVER: dict[str, str] = {"11": "450.80.02", "12": "525.60.13", "13": "580"}


def parse_version(text: str) -> tuple[int, ...]:
    """'535.104.05' → (535, 104, 5); non-numeric parts end the tuple."""
    parts: list[int] = []
    for piece in text.strip().split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def check_driver(torch_cuda: str, driver: str) -> tuple[Verdict, str, str | None]:
    """Is `driver` new enough for a torch built with CUDA `torch_cuda`? → (verdict, seen, fix)."""
    major_minor = ".".join(torch_cuda.split(".")[:2])
    major = major_minor.split(".")[0]
    have = parse_version(driver)
    full = MIN_DRIVER.get(major_minor)
    compat = MINOR_COMPAT_DRIVER.get(major)
    if full is None and compat is None:
        return (
            "warn",
            f"driver {driver}; CUDA {torch_cuda} is not in distrain's table",
            (
                "Check NVIDIA's CUDA release notes (table 3) for the minimum driver of "
                "this CUDA version."
            ),
        )
    if full is None:  # a newer minor release than the table knows: minor compatibility applies
        full = compat
    assert full is not None
    if have >= parse_version(full):
        return "ok", f"driver {driver} >= {full} required by CUDA {major_minor}", None
    if compat is not None and have >= parse_version(compat):
        return (
            "warn",
            f"driver {driver} < {full} (CUDA {major_minor} GA) but >= {compat} (minor "
            "version compatibility)",
            (
                "Runs with a limited feature set (no PTX JIT of newer code); upgrade the "
                f"driver to >= {full}."
            ),
        )
    return (
        "fail",
        f"driver {driver} is too old for torch's CUDA {major_minor} (needs >= {compat or full})",
        (
            f"Upgrade the NVIDIA driver to >= {full}, or install a torch wheel built "
            "for an older CUDA "
            "(pytorch.org 'previous versions')."
        ),
    )


def check_arch(capability: tuple[int, int], arch_list: list[str]) -> tuple[Verdict, str]:
    """Can torch's compiled architectures run on a GPU of compute `capability`? → (verdict, why).

    A cubin for sm_XY runs on any GPU of the same major version and minor >= Y; PTX
    (compute_XY) can be JIT-compiled for any newer GPU, slowly at first start.
    """
    major, minor = capability
    name = f"sm_{major}{minor}"
    sms: list[tuple[int, int]] = []
    ptx: list[tuple[int, int]] = []
    for arch in arch_list:
        kind, _, digits = arch.partition("_")
        if not digits.isdigit() and not digits.rstrip("af").isdigit():
            continue
        num = int(digits.rstrip("af"))
        (sms if kind == "sm" else ptx).append((num // 10, num % 10))
    if (major, minor) in sms:
        return "ok", f"{name} is compiled in"
    same_major = [s for s in sms if s[0] == major and s[1] <= minor]
    if same_major:
        best = max(same_major)
        return "ok", f"sm_{best[0]}{best[1]} cubins run on {name}"
    usable_ptx = [p for p in ptx if p <= (major, minor)]
    if usable_ptx:
        best = max(usable_ptx)
        return (
            "warn",
            f"only PTX compute_{best[0]}{best[1]} can run on {name} (JIT at start, slower)",
        )
    return "fail", f"{name} is not among torch's architectures {', '.join(arch_list) or '(none)'}"
