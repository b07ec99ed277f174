"""Checkpoint files themselves: corruption and fallback, pickles refused, retention, async saves,
the digits example's resume (mostly one process; tests/scripts/ckpt_worker.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, kill_group, python, run, session
from helpers.checkpoints import (
    JOB_TIMEOUT,
    WORKER,
    distrain_run,
    ok,
)


# -- the checkpoint files themselves (single process, in-process where possible) ---------------
@pytest.fixture(scope="module")
def three_checkpoints_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A single-process run keeping step 8, 12 and 16 (saves every 4 steps, keep 3), made once
    per test run (a module fixture is made once per xdist worker); tests corrupt copies only."""

    def make(tmp: Path) -> str:
        d = tmp / "ckpt"
        shutil.rmtree(d, ignore_errors=True)  # a failed try left it
        ok(run([python(), WORKER, "--dir", str(d), "--out", f"{tmp}/a.pt"], timeout=JOB_TIMEOUT))
        steps = sorted(p.name for p in d.glob("step_*"))
        assert steps == [f"step_{s:08d}" for s in (8, 12, 16)], steps
        assert (d / "latest").read_text().strip() == "step_00000016"
        return str(d)

    return Path(session.once(tmp_path_factory, "three-checkpoints", make))


@pytest.fixture
def three_checkpoints(three_checkpoints_once: Path, tmp_path: Path) -> Path:
    """A private copy of the three checkpoints, free to corrupt."""
    return Path(shutil.copytree(three_checkpoints_once, tmp_path / "ckpt"))


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "truncate-shard": (
        lambda d: os.truncate(d / "__0_0.distcp", (d / "__0_0.distcp").stat().st_size // 2),
        "__0_0.distcp has",
    ),
    "flip-a-byte-in-shard": (
        lambda d: _flip_byte(d / "__0_0.distcp"),
        "__0_0.distcp fails its sha256",
    ),
    "flip-a-byte-in-dcp-metadata": (
        lambda d: _flip_byte(d / ".metadata"),
        ".metadata fails its sha256",
    ),
    "flip-a-byte-in-rank-file": (
        lambda d: _flip_byte(d / "rank_00000.pt"),
        "rank_00000.pt fails its sha256",
    ),
    "truncate-shared": (lambda d: os.truncate(d / "shared.pt", 100), "shared.pt has 100 bytes"),
    "delete-shard": (lambda d: (d / "__0_0.distcp").unlink(), "__0_0.distcp is missing"),
    "delete-manifest": (lambda d: (d / "manifest.json").unlink(), "manifest.json is missing"),
    # a file the manifest does not list would be loaded unchecked (a rank file of a 2nd rank)
    "unlisted-rank-file": (
        lambda d: shutil.copy(d / "rank_00000.pt", d / "rank_00001.pt"),
        "rank_00001.pt is not listed in manifest.json",
    ),
}


def _rewrite_manifest(d: Path, edit: object) -> None:
    import json

    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps(edit(manifest)))  # type: ignore[operator]


# valid JSON, wrong shape: each once crashed verify() with KeyError/AttributeError/TypeError
MALFORMED = {
    "a-list": (lambda m: [m], "not a JSON object"),
    "no-files": (lambda m: {k: v for k, v in m.items() if k != "files"}, "no 'files' table"),
    "files-a-list": (lambda m: {**m, "files": list(m["files"])}, "no 'files' table"),
    "entry-without-sha": (
        lambda m: {**m, "files": {k: {"bytes": v["bytes"]} for k, v in m["files"].items()}},
        "lacks sha256/bytes",
    ),
    "entry-a-string": (
        lambda m: {**m, "files": {k: "x" for k in m["files"]}},
        "lacks sha256/bytes",
    ),
    "step-a-string": (lambda m: {**m, "step": "16"}, "not integers"),
    "path-escape": (
        lambda m: {**m, "files": {**m["files"], "../x.pt": m["files"]["shared.pt"]}},
        "bad file name '../x.pt'",
    ),
    "unknown-format": (lambda m: {**m, "format": 99}, "unknown format 99"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS) + [f"manifest-{k}" for k in MALFORMED])
def test_corrupt_newest_falls_back_to_previous(
    kind: str, three_checkpoints: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from distrain.checkpoint import find_latest_valid

    newest = three_checkpoints / "step_00000016"
    if kind.startswith("manifest-"):
        edit, message = MALFORMED[kind.removeprefix("manifest-")]
        _rewrite_manifest(newest, edit)
    else:
        corrupt, message = CORRUPTIONS[kind]
        corrupt(newest)
    assert find_latest_valid(str(three_checkpoints)) == str(three_checkpoints / "step_00000012")
    err = capsys.readouterr().err
    assert "skipping invalid checkpoint" in err and str(newest) in err and message in err, err


def test_unlisted_rank_file_is_never_loaded(three_checkpoints: Path, tmp_path: Path) -> None:
    """2 ranks on a 1-rank checkpoint plus a planted rank_00001.pt: the step is refused whole."""
    d = three_checkpoints
    shutil.copy(d / "step_00000016" / "rank_00000.pt", d / "step_00000016" / "rank_00001.pt")
    result = ok(distrain_run(2, "--dir", str(d), "--out", str(tmp_path / "u.pt"), "--epochs", "3"))
    assert (
        f"{d / 'step_00000016' / 'rank_00001.pt'} is not listed in manifest.json" in result.stderr
    )
    assert f"resumed from {d / 'step_00000012'} (step 12" in result.stdout


def test_corrupt_newest_end_to_end_and_stray_temp(three_checkpoints: Path, tmp_path: Path) -> None:
    d = three_checkpoints
    os.truncate(d / "step_00000016" / "__0_0.distcp", 100)
    stray = d / ".tmp-step_00000020"
    stray.mkdir()
    (stray / "rank_00000.pt.part").write_bytes(b"half a file")
    result = ok(
        run(
            [python(), WORKER, "--dir", str(d), "--out", str(tmp_path / "b.pt"), "--epochs", "3"],
            timeout=JOB_TIMEOUT,
        )
    )
    assert f"removing stray temporary {stray}" in result.stderr
    assert (
        f"skipping invalid checkpoint: {d / 'step_00000016' / '__0_0.distcp'} has 100 bytes"
        in result.stderr
    )
    assert f"resumed from {d / 'step_00000012'} (step 12" in result.stdout
    assert not stray.exists()
    assert torch.load(tmp_path / "b.pt", weights_only=True)["step"] == 24
    assert (
        d / "latest"
    ).read_text().strip() == "step_00000024"  # the bad step 16 was replaced by a good one
    from distrain.checkpoint import verify

    assert verify(str(d / "step_00000016")) is None


def test_no_valid_checkpoint_starts_fresh_said_once(
    three_checkpoints: Path, tmp_path: Path
) -> None:
    for step_dir in three_checkpoints.glob("step_*"):
        _flip_byte(step_dir / "__0_0.distcp")
    result = ok(distrain_run(2, "--dir", str(three_checkpoints), "--out", str(tmp_path / "c.pt")))
    assert result.stderr.count("starting fresh") == 1
    assert result.stderr.count("skipping invalid checkpoint") == 3


def test_pickled_object_is_refused(three_checkpoints: Path, tmp_path: Path) -> None:
    """A checkpoint whose payload needs unpickling a class is refused, even with valid checksums."""
    import json

    from distrain.checkpoint import CheckpointError, file_sha256, load_file

    d = three_checkpoints / "step_00000016"
    state = torch.load(d / "shared.pt", weights_only=True)
    state["extra"] = {"payload": subprocess.Popen}  # any importable callable: code on load
    torch.save(state, d / "shared.pt")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"]["shared.pt"] = {
        "sha256": file_sha256(str(d / "shared.pt")),
        "bytes": (d / "shared.pt").stat().st_size,
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError, match="refusing to load .*shared.pt: it contains a pickled Python object"
    ):
        load_file(str(d / "shared.pt"))
    result = run(
        [python(), WORKER, "--dir", str(three_checkpoints), "--out", str(tmp_path / "d.pt")],
        timeout=JOB_TIMEOUT,
    )
    assert result.returncode != 0 and "it contains a pickled Python object" in result.stderr
    assert "Traceback" not in result.stderr  # one clear line
    assert not (tmp_path / "d.pt").exists()


def test_pickled_object_in_dcp_metadata_is_refused(three_checkpoints: Path, tmp_path: Path) -> None:
    """DCP's .metadata is a pickle: one naming anything but DCP metadata types is refused, even
    with valid checksums (loaded through a restricted unpickler, never plain pickle.load)."""
    import pickle

    from distrain.checkpoint import file_sha256
    from distrain.checkpoint.dcp_io import load_metadata

    d = three_checkpoints / "step_00000016"
    metadata = load_metadata(str(d / ".metadata"))  # the genuine one loads
    metadata.planner_data = {"payload": subprocess.Popen}  # any importable callable: code on load
    (d / ".metadata").write_bytes(pickle.dumps(metadata))
    _rewrite_manifest(
        d,
        lambda m: {
            **m,
            "files": {
                **m["files"],
                ".metadata": {
                    "sha256": file_sha256(str(d / ".metadata")),
                    "bytes": (d / ".metadata").stat().st_size,
                },
            },
        },
    )
    result = run(
        [python(), WORKER, "--dir", str(three_checkpoints), "--out", str(tmp_path / "m.pt")],
        timeout=JOB_TIMEOUT,
    )
    assert result.returncode != 0
    assert (
        f"refusing to load {d / '.metadata'}: not plain DCP metadata (global 'subprocess.Popen'"
        in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "m.pt").exists()


def test_pickled_object_in_dcp_values_is_refused(tmp_path: Path) -> None:
    """A non-tensor DCP value that needs a class to unpickle is refused (DCP itself would
    torch.load it with weights_only=False)."""
    import torch.distributed.checkpoint as dcp

    from distrain.checkpoint import CheckpointError
    from distrain.checkpoint.dcp_io import load

    dcp.save(
        {"w": torch.ones(2), "note": {"lr": 0.1}}, checkpoint_id=str(tmp_path / "ok"), no_dist=True
    )
    state = {"w": torch.zeros(2), "note": {"lr": 0.0}}
    load(state, str(tmp_path / "ok"), None)
    assert torch.equal(state["w"], torch.ones(2)) and state["note"]["lr"] == 0.1
    dcp.save(
        {"w": torch.ones(2), "note": subprocess.Popen},
        checkpoint_id=str(tmp_path / "bad"),
        no_dist=True,
    )
    with pytest.raises(CheckpointError, match="refusing to load note: a pickled Python object"):
        load({"w": torch.zeros(2), "note": None}, str(tmp_path / "bad"), None)


def test_keep_last_k_and_latest_pointer(tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    ok(
        run(
            [
                python(),
                WORKER,
                "--dir",
                str(d),
                "--out",
                str(tmp_path / "a.pt"),
                "--every",
                "2",
                "--epochs",
                "1",
            ],
            timeout=JOB_TIMEOUT,
        )
    )
    assert sorted(p.name for p in d.glob("step_*")) == [
        "step_00000004",
        "step_00000006",
        "step_00000008",
    ]
    assert (d / "latest").read_text().strip() == "step_00000008"
    assert not list(d.glob(".tmp-*")) and not list(d.rglob("*.part"))
    shutil.rmtree(d)


@pytest.mark.slow
def test_digits_example_resumes(tmp_path: Path) -> None:
    """The example: SIGINT (as Ctrl-C) mid-run saves and exits; a rerun resumes and finishes."""
    d = tmp_path / "ckpt"
    args = [
        python(),
        str(REPO / "examples" / "train_digits.py"),
        "--epochs",
        "1",
        "--checkpoint-dir",
        str(d),
        "--checkpoint-every",
        "10",
        "--out",
        str(tmp_path / "out"),
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not list(d.glob("step_*")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=JOB_TIMEOUT)
    finally:
        kill_group(proc)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "received SIGINT" in err and "exiting on the stop signal" in out
    result = ok(run(args, timeout=JOB_TIMEOUT))
    assert "distrain: resumed from" in result.stdout and "done: test acc" in result.stdout


def test_async_save_and_extras_round_trip(tmp_path: Path, writes_environ: None) -> None:
    """In-process, one process: an async save restores model, optimizer and user extras exactly."""
    import distrain

    ctx = distrain.init(verbose=False)

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = torch.nn.Linear(4, 3)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    model, opt = make()
    ck = ctx.checkpointer(tmp_path / "ckpt", every_steps=2, async_save=True, handle_signals=False)
    assert ck.restore(model=model, optimizer=opt).fresh
    for step in (1, 2):
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
        ck.extra["best"] = [0.5, step]
        assert ck.maybe_save(step) == (step == 2)
    ck.close()
    model2, opt2 = make()
    resumed = ctx.checkpointer(tmp_path / "ckpt", handle_signals=False).restore(
        model=model2, optimizer=opt2
    )
    assert resumed.step == 2 and resumed.extra == {"best": [0.5, 2]}
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), model2.state_dict().values(), strict=True)
    )
    assert torch.equal(
        opt.state_dict()["state"][0]["momentum_buffer"],
        opt2.state_dict()["state"][0]["momentum_buffer"],
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_rng_and_model_round_trip(tmp_path: Path, writes_environ: None) -> None:
    """GPU: CUDA RNG states are saved and restored; a CUDA model and optimizer resume exactly."""
    from distrain.checkpoint import rng_state, set_rng_state

    torch.cuda.manual_seed_all(1)
    torch.randn(3, device="cuda")
    state = rng_state()
    assert "cuda" in state
    expected = torch.randn(8, device="cuda")
    set_rng_state(state)
    assert torch.equal(torch.randn(8, device="cuda"), expected)
    import distrain

    ctx = distrain.init(verbose=False)
    model = torch.nn.Linear(4, 3).cuda()
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 4, device="cuda")).sum().backward()
    opt.step()
    ck = ctx.checkpointer(tmp_path / "ckpt", handle_signals=False, async_save=True)
    ck.restore(model=model, optimizer=opt)
    ck.save(1)
    ck.close()
    model2 = torch.nn.Linear(4, 3).cuda()
    opt2 = torch.optim.Adam(model2.parameters())
    assert (
        ctx.checkpointer(tmp_path / "ckpt", handle_signals=False)
        .restore(model=model2, optimizer=opt2)
        .step
        == 1
    )
    assert torch.equal(model.weight, model2.weight) and model2.weight.is_cuda
    assert torch.equal(
        opt.state_dict()["state"][0]["exp_avg"], opt2.state_dict()["state"][0]["exp_avg"].cuda()
    )
