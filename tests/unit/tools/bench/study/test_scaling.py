"""tools/bench/study/scaling.py and runner.py: process-count lists, per-epoch records from run
dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.tools.bench.study.runner import _last_error_line, read_epochs
from distrain.tools.bench.study.scaling import parse_nproc


def test_parse_nproc_sorts_and_deduplicates() -> None:
    assert parse_nproc("4, 1,2,4") == [1, 2, 4]


@pytest.mark.parametrize("text", ["0", "1,x", "", "2,-1", "1.5"])
def test_parse_nproc_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--nproc expects positive integers"):
        parse_nproc(text)


def _write(run_dir: Path, rank: int, records: list[dict]) -> None:
    (run_dir / "metrics").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records]
    (run_dir / "metrics" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + '\n{"half-written')


def test_read_epochs_combines_ranks(tmp_path: Path) -> None:
    _write(tmp_path, 0,
           [{"event": "step"},
            {"event": "epoch", "epoch": 0, "rank": 0, "epoch_seconds": 2.0, "epoch_samples": 100,
                                             "values": {"accuracy": 0.8,
                                                        "loss": 0.5}}])  # fmt: skip
    _write(tmp_path, 1,
           [{"event": "epoch", "epoch": 0, "rank": 1, "epoch_seconds": 2.5, "epoch_samples": 100},
                         {"event": "epoch", "epoch": 1, "rank": 1, "epoch_seconds": 1.0,
                          "epoch_samples": 100}])  # fmt: skip
    # epoch 1 has no rank-0 record yet: not finished
    assert read_epochs(tmp_path) == [
        {"epoch": 0, "seconds": 2.5, "samples": 200, "ranks": 2, "test_acc": 0.8,
         "train_loss": 0.5}]  # fmt: skip


def test_read_epochs_of_an_empty_run(tmp_path: Path) -> None:
    assert read_epochs(tmp_path) == []


def test_last_error_line_skips_launcher_noise() -> None:
    log = ("W0101 12:00:00 torch noise\nTraceback (most recent call last):\n"
           "  File \"t.py\", line 1\nValueError: bad batch\n"
           "distrain run: job failed: rank 0 exited with code 1\n")  # fmt: skip
    assert _last_error_line(log) == "ValueError: bad batch"
    assert _last_error_line("") == "no output"
    assert _last_error_line("just words\n") == "just words"


def test_results_json_commands_carry_no_machine_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A committed report must not name this machine's interpreter or checkout."""
    import sys

    from distrain.tools.bench.study.summary import portable

    monkeypatch.chdir(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "distrain.cli",
        "run",
        str(tmp_path / "examples" / "train.py"),
        "/data/elsewhere",
    ]
    out = portable(
        {"configs": [{"name": "n1", "command": cmd}], "rounds": [{"command": cmd}], "workload": "x"}
    )
    assert out["configs"][0]["command"] == [
        "python3",
        "-m",
        "distrain.cli",
        "run",
        "examples/train.py",
        "/data/elsewhere",
    ]
    assert out["rounds"][0]["command"] == out["configs"][0]["command"] and out["workload"] == "x"


@pytest.mark.parametrize(
    ("extra", "given"),
    [
        (["--image-size", "64"], True),
        (["--batch-size", "8", "--image-size=32"], True),
        (["--image-size"], True),  # its value missing: the script refuses it, no probe
        (["--image-sizes", "3", "--image", "4"], False),  # neither is it, abbreviated or longer
        ([], False),
    ],
)
def test_the_probe_is_skipped_when_the_script_is_given_an_image_size(
    extra: list[str], given: bool
) -> None:
    from distrain.tools.bench.study.scaling import _gives_image_size

    assert _gives_image_size(extra) is given
