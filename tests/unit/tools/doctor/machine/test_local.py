"""tools/doctor/machine/local.py and bounded.py: probes concurrent, fixed order; a crash/hang
warns."""

from __future__ import annotations

import threading

import pytest

from distrain.tools.doctor.bounded import ProbeTimeout, call_bounded
from distrain.tools.doctor.check import Check
from distrain.tools.doctor.machine import local


def _ok(id: str) -> list[Check]:
    return [Check(id, id.split(".")[0], id, "ok", "fine")]


def test_results_keep_the_family_order_and_a_crash_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def crash() -> list[Check]:
        raise KeyError("nvml")

    monkeypatch.setattr(
        local,
        "_families",
        lambda opts: [("b", lambda: _ok("b.one")), ("gpu", crash), ("a", lambda: _ok("a.one"))],
    )
    checks = local.run_checks(local.Options())
    assert [c.id for c in checks] == ["b.one", "gpu.probe", "a.one"]
    assert checks[1].status == "warn" and checks[1].seen == "probe failed: KeyError: 'nvml'"


def test_a_hung_probe_is_reported_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(
        local,
        "_families",
        lambda opts: [("net", lambda: release.wait() and []), ("a", lambda: _ok("a.one"))],
    )
    try:
        checks = local.run_checks(local.Options(), timeout=0.05)
    finally:
        release.set()
    assert checks[0].id == "net.probe" and checks[0].seen == "no answer within 0.05 s"


def test_call_bounded_returns_or_reraises() -> None:
    assert call_bounded(lambda: 42, timeout=5) == 42
    with pytest.raises(ZeroDivisionError):
        call_bounded(lambda: 1 / 0, timeout=5)


def test_call_bounded_gives_up_on_a_stuck_call() -> None:
    release = threading.Event()
    try:
        with pytest.raises(ProbeTimeout, match="no answer within 0.01 s"):
            call_bounded(release.wait, timeout=0.01)
    finally:
        release.set()
