"""tests/helpers/cpu_log.py records a test's CPU, its waited children's included, and
scripts/suite_cpu.py sums the lines by file and by cost band."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cpu_log
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import suite_cpu  # noqa: E402

#: a child that burns about half a CPU second, then exits (waited for by `run`)
BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"


def test_a_waited_child_s_cpu_is_the_test_s(tmp_path: Path) -> None:
    with cpu_log.recorded("tests/jobs/test_x.py::test_burn", str(tmp_path)):
        subprocess.run([sys.executable, "-c", BURN], check=True)
    (line,) = [json.loads(ln) for f in tmp_path.glob("*.jsonl") for ln in f.open()]
    assert line["id"] == "tests/jobs/test_x.py::test_burn"
    assert line["cpu"] >= 0.5 and line["wall"] >= 0.5, line


def test_nothing_is_written_without_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with cpu_log.recorded("t", None):
        pass
    assert list(tmp_path.iterdir()) == []


def test_lines_are_summed_by_file_and_band() -> None:
    rows = [
        {"id": "a.py::t1", "cpu": 0.2, "wall": 1.0},
        {"id": "a.py::t2", "cpu": 12.0, "wall": 20.0},
        {"id": "b.py::t", "cpu": 60.0, "wall": 70.0},
    ]
    assert suite_cpu.by_file(rows) == [("b.py", 1, 60.0, 70.0), ("a.py", 2, 12.2, 21.0)]
    bands = {name: (n, cpu) for name, n, cpu in suite_cpu.bands(rows)}
    assert bands["0-1"] == (1, 0.2) and bands["10-20"] == (1, 12.0) and bands[">= 50"] == (1, 60.0)
    assert sum(n for n, _ in bands.values()) == 3
