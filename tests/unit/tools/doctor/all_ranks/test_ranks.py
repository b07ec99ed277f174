"""tools/doctor/all_ranks/ranks.py and rank_checks.py: all-ranks rules from gathered facts to
findings."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from distrain.tools.doctor.all_ranks.rank_checks import (
    FINGERPRINT_FIELDS,
    compare_fingerprints,
    measurement_checks,
)
from distrain.tools.doctor.all_ranks.ranks import _missing_from


def _entry(rank: int, host: str = "h0", **fields: Any) -> dict[str, Any]:
    fp = {f: "same" for f in FINGERPRINT_FIELDS}
    fp.update(torch="2.5", python="3.11", cuda="12.4", nccl="2.21")
    fp.update(fields)
    return {"rank": rank, "hostname": host, "fingerprint": fp}


def test_identical_fingerprints_are_ok() -> None:
    check = compare_fingerprints([_entry(0), _entry(1)])
    assert (
        check.status == "ok"
        and check.seen == "all 2 ranks: torch 2.5, python 3.11, CUDA 12.4, NCCL 2.21"
    )
    assert check.data["mismatches"] == {}


def test_the_odd_rank_out_is_named_against_the_majority() -> None:
    check = compare_fingerprints([_entry(0), _entry(1, "h1", torch="2.4"), _entry(2)])
    assert check.status == "fail"
    assert check.seen == "rank 1 on h1 has torch 2.4 (others: 2.5)"
    assert check.data["mismatches"] == {"torch": [1]}


def test_a_tie_goes_to_rank_zeros_value() -> None:
    check = compare_fingerprints([_entry(0, python="3.12"), _entry(1, "h1")])
    assert check.data["mismatches"] == {"python": [1]}
    assert "rank 1 on h1 has python 3.11 (others: 3.12)" in check.seen


def test_missing_from_monitored_barrier_message() -> None:
    assert _missing_from(
        RuntimeError("Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms")
    ) == [1, 3]
    assert _missing_from(RuntimeError("Rank 2 failed to pass monitoredBarrier in 5 ms")) == [2]
    assert _missing_from(RuntimeError("Connection reset")) == []


def _measurements(works: list[float], ok: list[bool] | None = None) -> list[Any]:
    per_rank = [{"rank": r, "allreduce_ok": (ok or [True] * len(works))[r],
                 "latency_us": 10.0 * (r + 1), "work_s": w}
                for r, w in enumerate(works)]  # fmt: skip
    arrived = [{"rank": r, "hostname": f"h{r}"} for r in range(len(works))]
    row = SimpleNamespace(bytes=16 * 2**20, time_us=2000.0, algbw_gbps=8.0, busbw_gbps=12.0)
    return measurement_checks(per_rank, arrived, row)


def test_measurement_checks_all_good() -> None:
    allreduce, latency, bandwidth, straggler = _measurements([0.10, 0.11, 0.10, 0.12])
    assert allreduce.status == "ok" and allreduce.seen.endswith("correct on every rank")
    assert latency.data == {"latency_us": 40.0}  # the slowest rank's median
    assert bandwidth.seen == "16 MiB all-reduce: 2.0 ms, algbw 8.000 GB/s, busbw 12.000 GB/s"
    assert straggler.status == "ok" and straggler.data["stragglers"] == []


def test_measurement_checks_name_a_straggler_and_wrong_sums() -> None:
    allreduce, _, _, straggler = _measurements(
        [0.10, 0.10, 0.25, 0.11], ok=[True, False, True, True]
    )
    assert allreduce.status == "fail" and allreduce.data == {"wrong_ranks": [1]}
    assert straggler.status == "warn" and straggler.data["stragglers"] == [2]
    assert straggler.seen.startswith("rank 2 on h2 took 250 ms (2.4x the median 105 ms)")
