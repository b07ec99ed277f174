"""The all-ranks doctor's judgements: fingerprints compared, measurements turned into checks."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from distrain.tools.doctor.check import Check

GROUP = "ranks"
#: fields that must be equal on every rank
FINGERPRINT_FIELDS = ("python", "torch", "torch_git", "cuda", "cudnn", "nccl", "distrain", "numpy")
#: a rank slower than this multiple of the median at the same work is a straggler
STRAGGLER_RATIO = 1.5
ALLREDUCE_ELEMENTS = 1 << 18


def compare_fingerprints(entries: list[dict[str, Any]]) -> Check:
    """One check: every fingerprint field equal on all ranks, else the odd ranks and hosts named."""
    problems: list[str] = []
    odd: dict[str, list[int]] = {}
    for fld in FINGERPRINT_FIELDS:
        values = [str(e["fingerprint"].get(fld)) for e in entries]
        counts = Counter(values)
        if len(counts) == 1:
            continue
        # the majority is the reference; a tie goes to rank 0's value
        top = max(counts.values())
        ref = values[0] if counts[values[0]] == top else next(v for v in values if counts[v] == top)
        for e, v in zip(entries, values, strict=True):
            if v != ref:
                odd.setdefault(fld, []).append(e["rank"])
                problems.append(
                    f"rank {e['rank']} on {e['hostname']} has {fld} {v} (others: {ref})"
                )
    data = {"fields": list(FINGERPRINT_FIELDS), "mismatches": odd}
    if problems:
        return Check(
            "ranks.versions",
            GROUP,
            "same versions",
            "fail",
            "; ".join(problems),
            "Install the same torch/CUDA/Python stack on every node (one container image "
            "or one lock file).",
            data,
        )
    fp = entries[0]["fingerprint"]
    return Check(
        "ranks.versions",
        GROUP,
        "same versions",
        "ok",
        f"all {len(entries)} ranks: torch {fp['torch']}, python {fp['python']}, CUDA {fp['cuda']}, "
        f"NCCL {fp['nccl']}",
        None,
        data,
    )


def measurement_checks(
    per_rank: list[dict[str, Any]], arrived: list[dict[str, Any]], row: Any
) -> list[Check]:
    """Rank 0's checks from every rank's measurements: all-reduce, latency, bandwidth, straggler."""
    world = len(per_rank)
    checks: list[Check] = []
    wrong = [p["rank"] for p in per_rank if not p["allreduce_ok"]]
    checks.append(
        Check(
            "ranks.allreduce",
            GROUP,
            "all-reduce",
            "fail" if wrong else "ok",
            f"{ALLREDUCE_ELEMENTS} random floats summed over {world} ranks: "
            + (f"WRONG on rank(s) {wrong}" if wrong else "correct on every rank"),
            "Data is corrupted in transit: check NCCL_P2P_DISABLE=1 / NCCL_IB_DISABLE=1 to find "
            "the faulty path."
            if wrong
            else None,
            {"wrong_ranks": wrong},
        )
    )
    lat = max(p["latency_us"] for p in per_rank)
    checks.append(
        Check(
            "ranks.latency",
            GROUP,
            "latency",
            "info",
            f"1-element all-reduce: {lat:.0f} us (slowest rank's median)",
            None,
            {"latency_us": lat},
        )
    )
    checks.append(
        Check(
            "ranks.bandwidth",
            GROUP,
            "bandwidth",
            "info",
            f"{row.bytes // 2**20} MiB all-reduce: {row.time_us / 1e3:.1f} ms, algbw "
            f"{row.algbw_gbps:.3f} GB/s, "
            f"busbw {row.busbw_gbps:.3f} GB/s",
            None,
            {
                "bytes": row.bytes,
                "time_us": row.time_us,
                "algbw_gbps": row.algbw_gbps,
                "busbw_gbps": row.busbw_gbps,
            },
        )
    )
    works = [p["work_s"] for p in per_rank]
    median = statistics.median(works)
    slow = [p for p in per_rank if p["work_s"] > STRAGGLER_RATIO * median]
    host_of = {e["rank"]: e["hostname"] for e in arrived}
    checks.append(
        Check(
            "ranks.straggler",
            GROUP,
            "straggler",
            "warn" if slow else "ok",
            (
                "; ".join(
                    f"rank {p['rank']} on {host_of[p['rank']]} took {p['work_s'] * 1e3:.0f} ms "
                    f"({p['work_s'] / median:.1f}x the median {median * 1e3:.0f} ms)"
                    for p in slow
                )
            )
            or f"same local work: {min(works) * 1e3:.0f}–{max(works) * 1e3:.0f} ms across ranks "
            f"(median {median * 1e3:.0f} ms)",
            "Check that node: CPU contention, thermal throttling, a slower GPU or fewer cores "
            "(nproc, nvidia-smi -q)."
            if slow
            else None,
            {"work_s": works, "median_s": median, "stragglers": [p["rank"] for p in slow]},
        )
    )
    return checks
