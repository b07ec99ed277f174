"""tools/bench/study/breakdown.py and the report's section: ms per step by phase from metrics
records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrain.tools.bench.study.breakdown import ordered, per_step_ms, read_breakdown
from distrain.tools.bench.study.report import breakdown_section


def _records(run_dir: Path, rank: int, lines: list[dict]) -> None:
    (run_dir / "metrics").mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics" / f"rank-{rank}.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + '\n{"breakdown_s": {"ste'
    )


def test_read_breakdown_takes_each_rank_last_record(tmp_path: Path) -> None:
    _records(tmp_path, 0, [{"event": "beat", "breakdown_s": {"steps": 2, "compute": 1.0}},
                           {"event": "end",
                            "breakdown_s": {"steps": 10, "compute": 2.0, "comm": 0.5,
                                            "data": 0.0}}])  # fmt: skip
    _records(tmp_path, 1, [{"event": "beat"}])  # no breakdown on this rank
    assert read_breakdown(tmp_path) == {"0": {"compute": 200.0, "comm": 50.0, "data": 0.0}}
    assert read_breakdown(tmp_path / "none") == {}


def test_per_step_ms_is_the_rank_mean_of_the_median_round() -> None:
    rounds = [{"breakdown": {"0": {"compute": 100.0}, "1": {"compute": 120.0, "comm": 20.0}}},
              {"breakdown": {"0": {"compute": 300.0}}}, {"breakdown": {"0": {"compute": 50.0}}},
              {"breakdown": {}}]  # fmt: skip
    assert per_step_ms(rounds) == pytest.approx({"compute": 110.0, "comm": 10.0})
    assert per_step_ms([{"breakdown": {}}]) == {}


def test_phases_stack_in_a_fixed_order() -> None:
    assert [p for p, _ in ordered({"other": 1.0, "zeta": 2.0, "compute": 3.0})] == [
        "data", "compute", "comm", "optimizer", "checkpoint", "other", "zeta"]  # fmt: skip


def test_report_section_with_and_without_data() -> None:
    lines = breakdown_section(
        [{"name": "n2-bn", "breakdown_ms": {"compute": 75.0, "comm": 25.0}}, {"name": "n1-bn"}]
    )
    assert "![Where a step's time goes](breakdown.png)" in lines
    assert "- n2-bn: compute 75.0 ms (75 %) · comm 25.0 ms (25 %)" in lines
    assert "no chart" in " ".join(breakdown_section([{"name": "x"}]))
