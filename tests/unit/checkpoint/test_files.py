"""checkpoint/files.py: manifest verification, corruption detection, the newest valid checkpoint.

Checkpoint directories are built by hand in tmp_path (small byte files plus a manifest) and then
truncated, flipped, extended or mangled; nothing here uses a process group or DCP.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from distrain.checkpoint.files import (
    FORMAT,
    LATEST,
    MANIFEST,
    SHARED_FILE,
    CheckpointError,
    atomic_write,
    describe_file,
    file_sha256,
    find_latest_valid,
    load_file,
    rank_file,
    read_manifest,
    step_dirs,
    verify,
)


def make_checkpoint(
    root: Path, step: int, files: dict[str, bytes] | None = None, **manifest: Any
) -> Path:
    """A complete step directory: the files, then a manifest listing each one's sha256 and size."""
    folder = root / f"step_{step:08d}"
    folder.mkdir(parents=True)
    files = (
        files
        if files is not None
        else {
            SHARED_FILE: b"shared state " * 10,
            rank_file(0): b"rng0",
            "__0_0.distcp": b"\x00" * 64,
        }
    )
    for name, data in files.items():
        (folder / name).write_bytes(data)
    doc = {
        "format": FORMAT,
        "step": step,
        "world_size": 1,
        "files": {n: describe_file(str(folder / n)) for n in files},
    }
    doc.update(manifest)
    (folder / MANIFEST).write_text(json.dumps(doc))
    return folder


def write_manifest(folder: Path, doc: object) -> None:
    (folder / MANIFEST).write_text(json.dumps(doc))


def test_a_complete_checkpoint_verifies(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 120)
    assert verify(str(folder)) is None
    manifest, problem = read_manifest(str(folder))
    assert problem is None and manifest is not None and manifest["step"] == 120


def test_rank_file_names_are_zero_padded() -> None:
    assert rank_file(1) == "rank_00001.pt"
    assert rank_file(12345) == "rank_12345.pt"


def test_a_flipped_byte_fails_the_checksum(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    data = bytearray((folder / "__0_0.distcp").read_bytes())
    data[10] ^= 0xFF
    (folder / "__0_0.distcp").write_bytes(bytes(data))
    assert verify(str(folder)) == f"{folder / '__0_0.distcp'} fails its sha256 checksum (corrupted)"


def test_a_truncated_file_is_named_with_its_size(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    with open(folder / SHARED_FILE, "r+b") as f:
        f.truncate(5)
    assert verify(str(folder)) == f"{folder / SHARED_FILE} has 5 bytes, expected 130 (truncated?)"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    (folder / rank_file(0)).unlink()
    assert verify(str(folder)) == f"{folder / rank_file(0)} is missing"


def test_a_file_the_manifest_does_not_list_invalidates_the_checkpoint(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    (folder / rank_file(2)).write_bytes(b"added later")
    problem = verify(str(folder))
    assert problem is not None and problem.endswith(
        f"{rank_file(2)} is not listed in {MANIFEST} (added after the save?)"
    )


def test_a_missing_manifest_means_incomplete(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    (folder / MANIFEST).unlink()
    assert verify(str(folder)) == f"{folder / MANIFEST} is missing (checkpoint incomplete)"


def test_unparsable_manifest(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    (folder / MANIFEST).write_text('{"format": 2, "step": ')
    assert verify(str(folder)) == f"{folder / MANIFEST} is unreadable (JSONDecodeError)"


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [(lambda doc: [doc], "malformed (not a JSON object)"),
     (lambda doc: {**doc, "format": 3}, "has an unknown format 3 (this distrain reads 1 and 2)"),
     (lambda doc: {k: v for k, v in doc.items() if k != "format"}, "has an unknown format None"),
     (lambda doc: {**doc, "step": "120"}, "malformed (step/world_size not integers)"),
     (lambda doc: {**doc, "step": True}, "malformed (step/world_size not integers)"),
     (lambda doc: {**doc, "world_size": 2.0}, "malformed (step/world_size not integers)"),
     (lambda doc: {**doc, "files": {}}, "malformed (no 'files' table)"),
     (lambda doc: {**doc, "files": {**doc["files"], "../escape.pt": doc["files"][SHARED_FILE]}},
      "bad file name '../escape.pt'"),
     (lambda doc: {**doc, "files": {**doc["files"], MANIFEST: doc["files"][SHARED_FILE]}},
      "bad file name 'manifest.json'"),
     (lambda doc: {**doc, "files": {**doc["files"], SHARED_FILE: {"sha256": "ab"}}},
      "entry of 'shared.pt' lacks sha256/bytes"),
     (lambda doc: {**doc, "files": {k: v for k, v in doc["files"].items() if k != SHARED_FILE}},
      "lists no shared.pt")],
)  # fmt: skip
def test_malformed_manifests_are_reasons_never_exceptions(
    tmp_path: Path, mangle: Any, reason: str
) -> None:
    folder = make_checkpoint(tmp_path, 1)
    doc = json.loads((folder / MANIFEST).read_text())
    write_manifest(folder, mangle(doc))
    manifest, problem = read_manifest(str(folder))
    assert manifest is None and problem is not None and reason in problem
    assert verify(str(folder)) == problem


def test_legacy_format_1_still_verifies(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 5, format=1)
    assert verify(str(folder)) is None


def test_step_dirs_newest_first_and_only_step_directories(tmp_path: Path) -> None:
    for step in (10, 300, 20):
        make_checkpoint(tmp_path, step)
    (tmp_path / ".tmp-step_00000400").mkdir()
    (tmp_path / "step_12").mkdir()  # fewer than 8 digits
    (tmp_path / "step_00000500").write_text("a file, not a directory")
    (tmp_path / LATEST).write_text("step_00000300")
    assert [step for step, _ in step_dirs(str(tmp_path))] == [300, 20, 10]
    assert step_dirs(str(tmp_path / "absent")) == []


def test_find_latest_valid_skips_corrupt_newer_checkpoints_and_says_why(tmp_path: Path) -> None:
    good = make_checkpoint(tmp_path, 100)
    bad = make_checkpoint(tmp_path, 200)
    (bad / SHARED_FILE).write_bytes(b"X" * 130)  # same size, other bytes
    incomplete = make_checkpoint(tmp_path, 300)
    (incomplete / MANIFEST).unlink()
    warnings: list[str] = []
    assert find_latest_valid(str(tmp_path), warn=warnings.append) == str(good)
    assert len(warnings) == 2
    assert "step_00000300" in warnings[0] and "is missing (checkpoint incomplete)" in warnings[0]
    assert "step_00000200" in warnings[1] and "fails its sha256 checksum" in warnings[1]


def test_find_latest_valid_with_nothing_valid(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 1)
    (folder / SHARED_FILE).unlink()
    assert find_latest_valid(str(tmp_path), warn=lambda message: None) is None


def test_atomic_write_returns_the_hash_and_size_of_what_landed(tmp_path: Path) -> None:
    target = tmp_path / "shared.pt"

    def write(f: Any) -> None:
        f.write(b"hello ")
        f.write(b"world")

    sha, size = atomic_write(str(target), write)
    assert target.read_bytes() == b"hello world"
    assert (sha, size) == (file_sha256(str(target)), 11)
    assert describe_file(str(target)) == {"sha256": sha, "bytes": 11}
    assert not os.path.exists(f"{target}.part")


def test_load_file_reads_tensors_and_plain_data(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    torch.save({"step": 3, "w": torch.arange(4)}, path)
    state = load_file(str(path))
    assert state["step"] == 3 and torch.equal(state["w"], torch.arange(4))


class Payload:
    """An arbitrary pickled object: what a malicious or careless checkpoint could contain."""


def test_load_file_refuses_pickled_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"obj": Payload()}, path)
    with pytest.raises(
        CheckpointError, match=r"refusing to load .*evil\.pt: it contains a pickled Python object"
    ):
        load_file(str(path))
