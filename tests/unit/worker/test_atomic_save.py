"""torch.save to a path under distrain: a temporary file beside it, renamed over it
(worker/atomic_save.py).  The wrapper is tested on torch's own save, not installed globally."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import psutil
import pytest
import torch

from distrain.worker.atomic_save import _prefix, atomic

save = atomic(torch.serialization.save)


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_a_path_is_written_whole_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pt"
    save({"step": 1, "w": torch.arange(4.0)}, path)
    save({"step": 2, "w": torch.arange(4.0)}, str(path))
    assert torch.load(path, weights_only=True)["step"] == 2
    assert _siblings(path) == ["snapshot.pt"]


def test_an_existing_file_keeps_its_mode_and_a_link_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.pt"
    save({"step": 1}, real)
    os.chmod(real, 0o640)
    link = tmp_path / "latest.pt"
    link.symlink_to(real)
    save({"step": 2}, link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert torch.load(real, weights_only=True)["step"] == 2
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_file_objects_and_special_files_are_written_as_torch_writes_them(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    save({"step": 3}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["step"] == 3
    save({"step": 4}, os.devnull)  # no temporary file in /dev, no replaced device
    assert Path(os.devnull).is_char_device()


def test_a_failed_save_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pt"
    save({"step": 1}, path)
    with pytest.raises(Exception):  # noqa: B017 (torch's pickling error type varies)
        save({"step": 2, "bad": lambda: None}, path)
    assert torch.load(path, weights_only=True)["step"] == 1
    assert _siblings(path) == ["snapshot.pt"]


def test_a_gone_process_temporary_file_is_swept_a_live_ones_kept(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pt"
    gone = next(p for p in range(4_000_000, 1, -1) if not psutil.pid_exists(p))
    stale = tmp_path / f"{_prefix('snapshot.pt')}{gone}.140245.tmp"
    live = tmp_path / f"{_prefix('snapshot.pt')}{os.getppid()}.140245.tmp"
    other_host = tmp_path / ".snapshot.pt.distrain-elsewhere-1.tmp"
    for p in (stale, live, other_host):
        p.write_bytes(b"partial")
    save({"step": 1}, path)
    assert _siblings(path) == sorted(["snapshot.pt", live.name, other_host.name])
