"""distrain/events/stream.py: one JSONL stream per job, written whole by concurrent processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distrain.events import FILE, KINDS, emit, job_events, read_events, stream

#: processes that write at once, and lines each: enough that unsynchronised writes would tear
WRITERS, LINES = 4, 300

WRITER = textwrap.dedent(
    """
    import sys
    from distrain.events import emit

    folder, me, lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for i in range(lines):
        # a line long enough (~9 KiB) that a write split in pieces would show
        emit("breakdown", folder, rank=me, summary={"i": i, "pad": str(me) * 9000})
    """
)


def test_concurrent_writers_never_tear_a_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(w), str(LINES)], env=env)
        for w in range(WRITERS)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    raw = Path(stream(str(tmp_path))).read_bytes().splitlines()
    assert len(raw) == WRITERS * LINES
    seen: dict[int, list[int]] = {}
    for line in raw:
        event = json.loads(line)  # a torn or interleaved line would not parse
        assert event["summary"]["pad"] == str(event["rank"]) * 9000
        seen.setdefault(event["rank"], []).append(event["summary"]["i"])
    assert seen == {w: list(range(LINES)) for w in range(WRITERS)}  # each writer's lines, in order


def test_each_event_names_its_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_JOB_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("DISTRAIN_REPLICA_GROUP", "2")
    assert emit("fallback", reason="why")
    (event,) = job_events(str(tmp_path))
    assert event["kind"] == "fallback" and event["reason"] == "why"
    assert (event["rank"], event["node"], event["group"], event["pid"]) == (3, 1, 2, os.getpid())
    assert abs(event["time"] - __import__("time").time()) < 60


def test_unknown_kind_is_refused_and_no_folder_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown event kind 'progress'"):
        emit("progress", str(tmp_path))
    assert not emit("watchdog")  # outside distrain run: no DISTRAIN_JOB_DIR
    assert not emit("watchdog", str(tmp_path / "gone"))  # the launcher removed it: no error
    assert set(KINDS) >= {"breakdown", "failure", "rehearsal", "fallback", "checkpoint"}


def test_reader_goes_on_from_its_offset_and_waits_for_whole_lines(tmp_path: Path) -> None:
    path = stream(str(tmp_path))
    assert read_events(path) == ([], 0)  # no stream yet: empty
    emit("watchdog", str(tmp_path), rank=0)
    first, offset = read_events(path)
    assert [e["rank"] for e in first] == [0] and offset == os.path.getsize(path)
    with open(path, "a") as f:
        f.write('{"kind": "watchdog", "rank": 1')  # a line still being written
    assert read_events(path, since=offset) == ([], offset)
    with open(path, "a") as f:
        f.write("}\nnot json\n[1, 2]\n")
    emit("failure", str(tmp_path), message="boom")
    later, end = read_events(path, since=offset)
    assert [e["kind"] for e in later] == ["watchdog", "failure"] and end == os.path.getsize(path)
    assert [e["message"] for e in read_events(path, kind="failure")[0]] == ["boom"]


def test_file_name_is_the_documented_one() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "environment.md").read_text()
    assert f"$DISTRAIN_JOB_DIR/{FILE}" in doc


def test_an_event_written_after_a_cut_short_one_is_still_read(tmp_path: Path) -> None:
    emit("checkpoint", str(tmp_path), step=1, path="a")
    with open(stream(str(tmp_path)), "ab") as f:
        f.write(b'{"kind": "checkpoint", "step": 2, "pa')  # the disk filled mid-write
    emit("checkpoint", str(tmp_path), step=3, path="c")
    assert [e["step"] for e in job_events(str(tmp_path))] == [1, 3]
