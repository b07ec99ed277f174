"""tools/doctor/machine/compat.py: driver ↔ CUDA and GPU architecture ↔ torch build rules, from
tables."""

from __future__ import annotations

import pytest

from distrain.tools.doctor.machine.compat import MIN_DRIVER, check_arch, check_driver, parse_version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("535.104.05", (535, 104, 5)),
        ("580", (580,)),
        (" 12.4 ", (12, 4)),
        ("550.x.1", (550,)),
        ("", ()),
    ],
)
def test_parse_version(text: str, expected: tuple[int, ...]) -> None:
    assert parse_version(text) == expected


def test_table_minimums_are_increasing_with_cuda() -> None:
    ordered = sorted(MIN_DRIVER, key=parse_version)
    assert [parse_version(MIN_DRIVER[v]) for v in ordered] == sorted(
        parse_version(MIN_DRIVER[v]) for v in ordered
    )


def test_new_enough_driver_is_ok() -> None:
    verdict, seen, fix = check_driver("12.4", "550.54.14")
    assert (verdict, fix) == (
        "ok",
        None,
    ) and seen == "driver 550.54.14 >= 550.54.14 required by CUDA 12.4"


def test_minor_version_compatibility_is_a_warning() -> None:
    verdict, seen, fix = check_driver("12.4.1", "535.104.05")
    assert verdict == "warn" and "minor version compatibility" in seen
    assert fix is not None and "upgrade the driver to >= 550.54.14" in fix


def test_too_old_a_driver_fails() -> None:
    verdict, seen, fix = check_driver("12.8", "470.57.02")
    assert (
        verdict == "fail"
        and seen == "driver 470.57.02 is too old for torch's CUDA 12.8 (needs >= 525.60.13)"
    )
    assert fix is not None and fix.startswith("Upgrade the NVIDIA driver to >= 570.26")


def test_a_newer_minor_than_the_table_uses_minor_compatibility() -> None:
    assert check_driver("12.7", "560.0")[0] == "ok"  # >= 525.60.13, the 12.x floor
    assert check_driver("12.7", "520.0")[0] == "fail"


def test_an_unknown_cuda_major_is_a_warning() -> None:
    verdict, seen, _ = check_driver("99.1", "999.0")
    assert verdict == "warn" and "not in distrain's table" in seen


ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "compute_90"]


@pytest.mark.parametrize(
    ("capability", "verdict", "why"),
    [((8, 0), "ok", "sm_80 is compiled in"),
     ((8, 9), "ok", "sm_86 cubins run on sm_89"),
     ((10, 0), "warn", "only PTX compute_90 can run on sm_100 (JIT at start, slower)"),
     ((3, 7), "fail", "sm_37 is not among torch's architectures sm_50")],
)  # fmt: skip
def test_check_arch(capability: tuple[int, int], verdict: str, why: str) -> None:
    got_verdict, got_why = check_arch(capability, ARCHS)
    assert got_verdict == verdict and got_why.startswith(why)


def test_check_arch_reads_arch_specific_suffixes_and_empty_lists() -> None:
    assert check_arch((9, 0), ["sm_90a"]) == ("ok", "sm_90 is compiled in")
    assert check_arch((8, 0), []) == ("fail", "sm_80 is not among torch's architectures (none)")
