"""`distrain top` on a folder that is no job's (empty, unreadable, a bad refresh): one line each.

That a missing folder is one line on a real `distrain top` is tests/jobs/test_monitor.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.tools.top.cli import main as top_main


def test_top_without_a_job_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    (empty / "metrics").mkdir(parents=True)
    junk = tmp_path / "junk"
    (junk / "metrics").mkdir(parents=True)
    (junk / "metrics" / "rank-0.jsonl").write_text("not json\n")
    for target, code in [
        ([str(empty), "--once"], 1),
        ([str(junk), "--json"], 1),
        ([str(empty), "--refresh", "0"], 2),
    ]:
        with pytest.raises(SystemExit) as exc:
            top_main(target)
        assert exc.value.code == code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("distrain top: error:"), err
