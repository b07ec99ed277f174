"""`distrain bench comm`: real gloo collectives, nccl-tests' bandwidth formulas, the data check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import python, run
from helpers.faults import fault_env

from distrain.errors import UsageError
from distrain.tools.bench.comm import _parser, _validate, bus_factor, parse_bytes, sizes

BENCH = [python(), "-m", "distrain.cli", "bench", "comm"]


def test_sizes_and_factors() -> None:
    assert (
        sizes(8, 64) == [8, 16, 32, 64]
        and parse_bytes("64M") == 64 * 2**20
        and parse_bytes("4K") == 4096
    )
    assert (
        bus_factor("all_reduce", 4) == 1.5
        and bus_factor("all_gather", 4) == 0.75
        and bus_factor("broadcast", 4) == 1
    )


def test_all_ops_positive_and_correct(tmp_path: Path) -> None:
    plot = tmp_path / "comm.png"
    res = run(BENCH + ["-n", "2", "--device", "cpu", "--json", "-b", "8", "-e", "64K", "-f", "64",
                       "--iters", "3", "--warmup", "1",
                       "--plot", str(plot)], timeout=240)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    # the plot (busbw per size and op), and nothing about how the tool's own ranks start
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {plot}" in res.stderr, (
        res.stderr[-2000:]
    )
    assert "runs a module" not in res.stderr, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert {r["op"] for r in doc["results"]} == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
    }
    assert sorted({r["bytes"] for r in doc["results"]}) == [8, 512, 32768]
    for r in doc["results"]:
        assert r["time_us"] > 0 and r["algbw_gbps"] > 0 and r["correct"] is True, r
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * bus_factor(r["op"], 2)) < 1e-12
    assert doc["summary"]["all_correct"] is True


def test_corrupted_rank_fails_the_check() -> None:
    res = run(
        BENCH
        + [
            "-n",
            "2",
            "--device",
            "cpu",
            "--json",
            "-e",
            "16",
            "--ops",
            "all_reduce,reduce_scatter",
            "--iters",
            "2",
            "--warmup",
            "0",
        ],
        timeout=240,
        env=fault_env(DTEST_FAULT_BENCH_CORRUPT="1"),
    )
    doc = json.loads(res.stdout)
    assert res.returncode != 0
    assert doc["summary"]["all_correct"] is False
    assert all(r["correct"] is False and r["wrong_ranks"] == [1] for r in doc["results"]), doc[
        "results"
    ]


def test_bad_input_is_one_line() -> None:
    res = run(BENCH + ["--ops", "all_to_all"], timeout=120)
    assert (
        res.returncode == 2
        and len(res.stderr.strip().splitlines()) == 1
        and "Traceback" not in res.stderr
    ), res.stderr


def test_one_process_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from distrain.tools.bench.comm import main

    with pytest.raises(SystemExit) as exc:
        main(["-n", "1"])
    assert exc.value.code == 2 and "at least 2 processes" in capsys.readouterr().err


def test_dispatcher_rejects_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    from distrain.tools.bench.cli import main

    assert main(["nope"]) == 2 and "unknown benchmark 'nope'" in capsys.readouterr().err


def test_size_validation() -> None:
    parser = _parser()
    for argv in (["-b", "1G", "-e", "1K"], ["-e", "lots"], ["--iters", "0"]):
        with pytest.raises(UsageError):
            _validate(parser.parse_args(argv))
