"""The memory tier's files (checkpoint/memory_tier/files.py): record after data, verify, prune,
sweep."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
import torch

from distrain.checkpoint.files import CheckpointError
from distrain.checkpoint.memory_tier.files import (
    listed,
    load_bytes,
    newest_valid,
    prune,
    remove_partial,
    snapshot_name,
    sweep,
    verified,
    write_snapshot,
)
from distrain.process import peers


def _save(folder: Path, rank: int, step: int, world: int = 2) -> Path:
    state = {"format": 1, "step": step, "w": torch.arange(10.0) + step}
    path = write_snapshot(
        str(folder), rank, step, lambda f: torch.save(state, f), {"world_size": world}
    )
    return Path(path)


def test_written_snapshot_verifies_and_loads(tmp_path: Path) -> None:
    path = _save(tmp_path, 1, 7)
    record, problem = verified(str(path))
    assert problem is None and record is not None
    assert record["step"] == 7 and record["bytes"] == path.stat().st_size
    assert record["digest"].startswith("crc32:")
    state = load_bytes(path.read_bytes(), str(path))
    assert torch.equal(state["w"], torch.arange(10.0) + 7)
    assert not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-record"])
def test_damaged_snapshot_is_skipped_with_one_line_and_removed(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(tmp_path, 0, 5)
    path = _save(tmp_path, 0, 6)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        path.with_suffix(".json").unlink()
    assert newest_valid(str(tmp_path), 0) == [5]
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "skipping memory snapshot" in line]
    assert len(lines) == 1 and snapshot_name(0, 6) in lines[0], lines
    assert not path.exists()


def test_other_world_size_left_out(tmp_path: Path) -> None:
    _save(tmp_path, 0, 3, world=4)
    assert newest_valid(str(tmp_path), 0, world=2) == []
    assert newest_valid(str(tmp_path), 0, world=4) == [3]


def test_prune_keeps_the_newest_two_per_rank(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        _save(tmp_path, 0, step)
    _save(tmp_path, 1, 1)
    prune(str(tmp_path), 0)
    assert sorted(listed(str(tmp_path))[0]) == [3, 4]
    assert sorted(listed(str(tmp_path))[1]) == [1]
    assert not (tmp_path / "r00000-s00000002.json").exists()


def test_pickled_object_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    torch.save({"format": 1, "evil": Path("x")}, buf)  # a pickled object, not plain data
    with pytest.raises(CheckpointError, match="cannot read memory snapshot"):
        load_bytes(buf.getvalue(), "x")


def test_sweep_removes_only_ended_jobs(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    prefix = peers.process_identity().rsplit(":", 1)[0]
    folders = {}
    for name, owner in (
        ("ended", f"{prefix}:{done.pid}"),
        ("live", f"{prefix}:{os.getpid()}"),
        ("mine", f"{prefix}:{done.pid}"),
        ("elsewhere", f"other-boot:1:{done.pid}"),
    ):
        folders[name] = tmp_path / f"distrain-mem-{name}"
        folders[name].mkdir()
        (folders[name] / "owner").write_text(owner)
    (tmp_path / "not-ours").mkdir()
    sweep(str(tmp_path), str(folders["mine"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "distrain-mem-elsewhere",
        "distrain-mem-live",
        "distrain-mem-mine",
        "not-ours",
    ]


def test_partial_writes_removed_snapshots_kept(tmp_path: Path) -> None:
    path = _save(tmp_path, 0, 4)
    for name in ("r00000-s00000005.pt.part", "r00001-s00000005.json.part"):
        (tmp_path / name).write_bytes(b"x")
    remove_partial(str(tmp_path), rank=1)
    assert not (tmp_path / "r00001-s00000005.json.part").exists()
    assert (tmp_path / "r00000-s00000005.pt.part").exists()
    remove_partial(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.with_suffix(".json").name, path.name]
