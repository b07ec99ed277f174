"""monitor/: the recorder in one process (bounded records, no monitor without a run dir), the GPU
probe, and the run dir a launcher hands its workers; the jobs that record are
tests/jobs/test_monitor.py's."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from distrain.launch.plan import plan
from distrain.launch.report.dry_run import torchrun_command
from distrain.monitor import Monitor, open_monitor, rank_file
from distrain.monitor.probes import GPUProbe
from distrain.settings import Settings

SCRIPT = str(Path(__file__).resolve().parents[3] / "examples" / "train_digits.py")


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_monitor_in_process(tmp_path: Path) -> None:
    """Without a GPU the probe is silent; records are bounded in number and end with 'end'."""
    mon = Monitor(tmp_path, rank=0, world_size=1, gpu_index=0, interval=0.2, tensorboard=False)
    for i in range(20000):
        mon.log(loss=torch.tensor(float(i)), samples=4)
    time.sleep(0.5)
    mon.log(advance=False, accuracy=0.75)
    mon.close()
    recs = _records(rank_file(tmp_path, 0))
    assert recs[0]["event"] == "start" and recs[-1]["event"] == "end"
    assert len(recs) < 20  # bounded by time, not by calls
    assert recs[-1]["step"] == 20000 and recs[-1]["samples"] == 80000
    assert recs[-1]["values"] == {"loss": 19999.0, "accuracy": 0.75}
    with pytest.raises(TypeError):
        mon.log(loss="high")
    if not torch.cuda.is_available():
        assert not any("gpu_util" in r for r in recs)


def test_no_run_dir_means_no_monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISTRAIN_RUN_DIR", raising=False)
    assert open_monitor(Settings.read().run_dir, 0, 1, None) is None  # ctx.log() is then a no-op
    monkeypatch.setenv("DISTRAIN_RUN_DIR", str(tmp_path))
    mon = open_monitor(Settings.read().run_dir, 0, 1, None)  # what init() does
    assert mon is not None and mon.run_dir == tmp_path
    mon.close()  # never logged: no thread, no files
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and its NVML driver")
def test_gpu_probe_reads_nvml() -> None:
    probe = GPUProbe(0)
    values = probe.read()
    probe.close()
    assert probe is not None and 0 <= values["gpu_util"] <= 100 and values["gpu_mem_total"] > 0


def test_gpu_probe_silent_without_driver() -> None:
    probe = GPUProbe(0)
    if not torch.cuda.is_available():
        assert not probe.available and probe.read() == {}
    probe.close()
    assert GPUProbe(None).read() == {}


def test_run_dir_reaches_workers_env() -> None:
    assert plan(["-n", "2", "--run-dir", "some/dir", SCRIPT]).env[
        "DISTRAIN_RUN_DIR"
    ] == os.path.abspath("some/dir")
    assert plan(["--log-dir", "logs", SCRIPT]).env["DISTRAIN_RUN_DIR"] == os.path.abspath("logs")
    assert "DISTRAIN_RUN_DIR" not in plan([SCRIPT]).env
    assert "--run-dir" not in torchrun_command(plan(["--run-dir", "x", SCRIPT]))
