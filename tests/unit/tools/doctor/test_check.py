"""tools/doctor/check.py and report.py: statuses, the summary, the worst status, the JSON."""

from __future__ import annotations

import pytest

from distrain.tools.doctor.check import SCHEMA_VERSION, STATUSES, Check, summarise, worst
from distrain.tools.doctor.report import document


def _check(status: str, id: str = "x.y") -> Check:
    return Check(id, "x", "title", status, "seen")  # type: ignore[arg-type]


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="bad status 'error'"):
        _check("error")


def test_statuses_from_best_to_worst() -> None:
    assert STATUSES == ("ok", "info", "warn", "fail")


def test_summarise_counts_every_status() -> None:
    checks = [_check("ok"), _check("warn"), _check("ok"), _check("fail")]
    assert summarise(checks) == {"ok": 2, "info": 0, "warn": 1, "fail": 1}


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], "ok"),
        (["info", "ok"], "info"),
        (["warn", "info"], "warn"),
        (["ok", "fail", "warn"], "fail"),
    ],
)
def test_worst(statuses: list[str], expected: str) -> None:
    assert worst([_check(s) for s in statuses]) == expected


def test_json_form_keeps_every_field() -> None:
    check = Check(
        "gpu.nvml", "gpu", "GPUs", "warn", "none", "install a driver", {"state": "no_driver"}
    )
    assert check.to_json() == {"id": "gpu.nvml", "group": "gpu", "title": "GPUs", "status": "warn",
                               "seen": "none",
                               "fix": "install a driver",
                               "data": {"state": "no_driver"}}  # fmt: skip


def test_document_carries_status_summary_and_checks() -> None:
    doc = document(
        [_check("ok", "a"), _check("fail", "b")],
        elapsed_s=1.23456,
        mode="all-ranks",
        ranks={"world_size": 2},
    )
    assert doc["schema_version"] == SCHEMA_VERSION and doc["tool"] == "distrain doctor"
    assert (doc["status"], doc["summary"]["fail"], doc["elapsed_s"], doc["mode"]) == (
        "fail",
        1,
        1.235,
        "all-ranks",
    )
    assert [c["id"] for c in doc["checks"]] == ["a", "b"] and doc["ranks"] == {"world_size": 2}
