"""launch/report/local_rank_hint.py: scripts written for torch.distributed.launch's --local_rank."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distrain.launch.report.local_rank_hint import hint, parses_local_rank


@pytest.mark.parametrize(
    ("source", "line"),
    [("import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int)\n",
      3),
     ("p.add_argument('--local-rank', '--local_rank', type=int, default=0)\n", 1),
     ("p.add_argument('--rank', type=int)\n", None),
     ("print('--local_rank')\n", None),
     ("not python(\n", None)],
)  # fmt: skip
def test_parses_local_rank(tmp_path: Path, source: str, line: int | None) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    assert parses_local_rank(str(script)) == line


def test_no_hint_when_the_flag_is_passed_or_no_script_is_read(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("p.add_argument('--local_rank', type=int)\n")

    def args(**kw: object) -> argparse.Namespace:
        base = {
            "legacy_local_rank": False,
            "module": False,
            "no_python": False,
            "training_script": str(script),
        }
        return argparse.Namespace(**{**base, **kw})

    assert hint(args(), "distrain run") == (
        "distrain run: hint: train.py parses --local_rank (line 1), which torch.distributed.launch "
        "passed and torchrun does not; add --legacy-local-rank to pass it"
    )
    assert hint(args(legacy_local_rank=True), "distrain run") is None
    assert hint(args(module=True), "distrain run") is None
