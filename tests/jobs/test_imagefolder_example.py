"""examples/train_imagefolder.py on a generated class-subfolder dataset, on 1 and 2 processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from helpers import EXAMPLES, python, run
from helpers.images import class_folders
from PIL import Image

SCRIPT = str(EXAMPLES / "train_imagefolder.py")
FAST = ["--arch", "resnet18", "--image-size", "32", "--epochs", "1", "--batch-size", "4"]


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes of small JPEGs, plus one grayscale PNG and one RGBA PNG (flower_photos layout)."""
    root = tmp_path_factory.mktemp("flowers")
    rng = class_folders(root, per_class=8, seed=0)
    Image.fromarray((rng.random((40, 40)) * 255).astype("uint8"), "L").save(
        root / "daisy" / "gray.png"
    )
    Image.fromarray((rng.random((40, 40, 4)) * 255).astype("uint8"), "RGBA").save(
        root / "roses" / "alpha.png"
    )
    (root / "tulips" / "notes.txt").write_text("not an image")
    return root


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sync_bn", [False, True], ids=["bn", "syncbn"])
def test_two_processes_one_epoch(image_folder: Path, tmp_path: Path, sync_bn: bool) -> None:
    out = tmp_path / "out"
    cmd = [
        python(),
        "-m",
        "distrain.cli",
        "run",
        "-n",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        SCRIPT,
        "--data",
        str(image_folder),
        "--out",
        str(out),
        *FAST,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
    ]
    res = run(
        cmd + (["--sync-bn"] if sync_bn else ["--no-sync-bn"]),
        timeout=280,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 processes" in res.stdout and f"sync_bn={sync_bn}" in res.stdout
    assert "lr 0.02 (0.01 × 2)" in res.stdout  # learning rate scaled by the world size
    assert "epoch 1/1" in res.stdout and "val acc" in res.stdout

    split = json.loads((out / "split.json").read_text())
    assert split["classes"] == ["daisy", "roses", "tulips"]
    files = sorted(f for f, _ in split["train"] + split["val"])
    assert (
        len(files) == 26 and "daisy/gray.png" in files and "roses/alpha.png" in files
    )  # .txt skipped
    for label in range(3):  # 80/20 per class
        n_val = sum(1 for _, y in split["val"] if y == label)
        n_train = sum(1 for _, y in split["train"] if y == label)
        assert n_val == 2 and n_train in (6, 7)
    assert list(
        (tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*")
    )  # ctx.log → TensorBoard
    state = torch.load(out / "model.pt", weights_only=True)
    assert state["fc.weight"].shape == (3, 512)
    assert (
        (tmp_path / "ckpt" / "latest").read_text().strip().startswith("step_")
    )  # distrain.checkpoint


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_pretrained_matching_weights_and_frozen_layers(image_folder: Path, tmp_path: Path) -> None:
    import torchvision

    torch.manual_seed(1)
    pretrained = torchvision.models.resnet18()  # 1000-class head: fc does not match 3 classes
    weights = tmp_path / "resnet18.pth"
    torch.save(pretrained.state_dict(), weights)
    total = len(torchvision.models.resnet18(num_classes=3).state_dict())

    out = tmp_path / "out"
    cmd = [
        python(),
        SCRIPT,
        "--data",
        str(image_folder),
        "--out",
        str(out),
        *FAST,
        "--pretrained",
        str(weights),
        "--freeze-layers",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
    ]
    res = run(cmd, timeout=280, env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"pretrained: loaded {total - 2} of {total} tensors" in res.stdout
    trained = torch.load(out / "model.pt", weights_only=True)
    ref = pretrained.state_dict()
    assert torch.equal(trained["conv1.weight"], ref["conv1.weight"])  # loaded and frozen
    assert torch.equal(trained["layer4.1.conv2.weight"], ref["layer4.1.conv2.weight"])
    assert trained["fc.weight"].shape == (3, 512)

    # a second run resumes from the checkpoint: only the new epoch trains
    res = run(cmd + ["--epochs", "2"], timeout=280, env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (
        "resumed from" in res.stdout and "epoch 2/2" in res.stdout and "epoch 1/2" not in res.stdout
    )


@pytest.fixture(scope="module")
def bigger_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes of 16 small JPEGs: 39 training images, 4 steps an epoch at 2 × 4."""
    root = tmp_path_factory.mktemp("flowers48")
    class_folders(root, per_class=16, seed=1)
    return root


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_sigkill_resumes_bitwise_with_other_num_workers(
    bigger_folder: Path, tmp_path: Path
) -> None:
    """BatchNorm, RandomResizedCrop/flip read by 2 DataLoader workers, a rank SIGKILLed at a random
    moment after the first checkpoint: the resumed run's model.pt equals, bit for bit, that of an
    uninterrupted run which read its data with no workers at all."""
    import random
    import signal
    import subprocess
    import time

    from helpers import kill_group

    common = [
        SCRIPT,
        "--data",
        str(bigger_folder),
        "--arch",
        "resnet18",
        "--image-size",
        "32",
        "--epochs",
        "3",
        "--batch-size",
        "4",
        "--checkpoint-every",
        "2",
    ]
    launcher = [python(), "-m", "distrain.cli", "run", "-n", "2"]
    ref = tmp_path / "ref"
    res = run(
        launcher
        + common
        + ["--out", str(ref), "--workers", "0", "--checkpoint-dir", str(tmp_path / "ref-ckpt")],
        timeout=280,
    )
    assert res.returncode == 0, res.stderr[-3000:]

    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    victim, delay = rng.choice([0, 1]), rng.uniform(0.0, 1.0)
    out, ckpt, run_dir = tmp_path / "killed", tmp_path / "ckpt", tmp_path / "run"
    cmd = (
        launcher
        + ["--max-restarts", "2", "--run-dir", str(run_dir)]
        + common
        + ["--out", str(out), "--workers", "2", "--checkpoint-dir", str(ckpt)]
    )
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 200
        while not (ckpt / "latest").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.02)
        time.sleep(delay)
        lines = (run_dir / "metrics" / f"rank-{victim}.jsonl").read_text().splitlines()
        pid = int(json.loads(lines[-1])["pid"])
        assert proc.poll() is None, f"the job ended before the kill (seed {seed})"
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=280)
    finally:
        kill_group(proc)
    what = f"rank {victim} killed {delay:.2f} s after the first checkpoint (seed {seed})"
    assert proc.returncode == 0, f"{what}\n{stderr[-3000:]}"
    assert "resumed from" in stdout, what
    a, b = (
        torch.load(ref / "model.pt", weights_only=True),
        torch.load(out / "model.pt", weights_only=True),
    )
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{what}: {len(differ)} tensors differ, e.g. {differ[:4]}"
