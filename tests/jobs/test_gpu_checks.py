"""scripts/gpu-checks.sh, the GPU acceptance in one command, where there is no GPU: one line, a
non-zero exit, nothing run; and its helper's checks (scripts/gpu_checks.py) on what steps leave.

The GPU steps themselves only run on a GPU machine (README "Tests"); these tests cover what can
go wrong everywhere else: the refusal, the list of GPU tests, the figures and the verdicts.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, python, run

SCRIPT = str(REPO / "scripts" / "gpu-checks.sh")
HELPER = str(REPO / "scripts" / "gpu_checks.py")
pytestmark = pytest.mark.timeout(120)


def _no_gpu_run(tmp_path: Path, env: dict[str, str]) -> None:
    start = time.monotonic()
    res = run(["bash", SCRIPT], timeout=60, env={"OUT": str(tmp_path / "out"), **env})
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
    assert (
        res.stderr.startswith("gpu-checks: no CUDA GPU on this machine")
        and "nothing was run" in res.stderr
    )
    assert not (tmp_path / "out").exists(), "a refused run must not start any step"
    assert time.monotonic() - start < 30


def test_hidden_gpus_are_refused_in_one_line(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES='' hides every GPU, also on a GPU machine."""
    _no_gpu_run(tmp_path, {"CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None, reason="a GPU machine: the script would run every step"
)
def test_a_machine_without_nvidia_smi_is_refused_in_one_line(tmp_path: Path) -> None:
    _no_gpu_run(tmp_path, {})


def test_the_gpu_tests_it_runs_are_the_ones_that_skip_without_a_gpu() -> None:
    ids = run([python(), HELPER, "gpu-tests"], timeout=60, check=True).stdout.split()
    assert "tests/jobs/test_gpu.py" in ids  # a file marked as a whole
    assert (
        "tests/jobs/test_checkpoint_files.py::test_cuda_rng_and_model_round_trip" in ids
    )  # one decorated test
    assert (
        "tests/jobs/test_gpu_comm.py::test_nccl_bench_comm_and_all_ranks_doctor" in ids
    )  # a named marker
    assert not any("test_plain_failure" in i for i in ids)  # skips *with* a GPU: not a GPU test


def test_gpt_throughput_is_the_steady_interval_and_mfu_uses_the_device_peak(tmp_path: Path) -> None:
    """Cumulative rates 1,000 tokens/s at step 20 and 1,500 at step 40 (batch 2 × 500 tokens, 1 GPU)
    put step 20 at 20 s and step 40 at 26.67 s: steps 21-40 ran 20,000 tokens / 6.67 s = 3,000/s
    (the start-up before step 1 stays out, as it must for MFU)."""
    log = tmp_path / "gpt.log"
    log.write_text("GPT 100.0 M parameters, 30.0 M characters of Python, strategy ddp\n"
                   "step 20/40  loss 2.0  grad norm 1.0  1,000 tokens/s\nstep 40/40  loss 1.5  "
                   "grad norm 1.0  1,500 tokens/s\n")  # fmt: skip
    res = run([python(), HELPER, "gpt", str(log), "--device", "NVIDIA H100 80GB HBM3", "--gpus",
               "1", "--batch", "2", "--block", "500"], timeout=60, check=True)  # fmt: skip
    flops = 6 * 100e6 + 12 * 16 * 768 * 500  # the 100m size: 16 layers, width 768
    assert res.stdout.startswith("3,000 tokens/s, "), res.stdout
    assert f"MFU {3000 * flops / 989.4e12:.1%} of 989 TFLOP/s" in res.stdout, res.stdout
    res = run([python(), HELPER, "gpt", str(log), "--device", "Tesla T4", "--gpus", "1", "--batch",
               "2", "--block", "500"],
              timeout=60, check=True)  # fmt: skip
    assert "device not in the peak table" in res.stdout


def test_native_and_rehearsed_parameters_are_compared(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(100)}, tmp_path / "gpu.pt")
    torch.save({"model": {"w": torch.ones(100) * 1.001}}, tmp_path / "near.pt")
    torch.save({"w": torch.ones(100) * 2}, tmp_path / "far.pt")
    near = run(
        [python(), HELPER, "compare", str(tmp_path / "gpu.pt"), str(tmp_path / "near.pt")],
        timeout=60,
    )
    far = run(
        [python(), HELPER, "compare", str(tmp_path / "gpu.pt"), str(tmp_path / "far.pt")],
        timeout=60,
    )
    assert near.returncode == 0 and "relative parameter difference 9.99e-04" in near.stdout, (
        near.stdout
    )
    assert far.returncode == 1 and "5.00e-01" in far.stdout, far.stdout


def test_the_report_counts_steps_and_shows_each_log(tmp_path: Path) -> None:
    (tmp_path / "steps.tsv").write_text(
        "machine\tok\t0\t2\ndoctor\tfailed\t1\t9\nbench_comm_nccl\tskipped\t-\t0\tneeds 2 GPUs\n"
    )
    (tmp_path / "machine.log").write_text("GPU 0: NVIDIA H100 80GB HBM3\n")
    (tmp_path / "doctor.log").write_text("distrain doctor: 13 ok · 1 fail\n")
    res = run([python(), HELPER, "report", str(tmp_path)], timeout=60, check=True)
    text = Path(res.stdout.strip()).read_text()
    assert "**1 of 3 steps ok, 1 skipped**; not ok: doctor" in text
    assert (
        "| bench_comm_nccl | skipped | - | 0 | needs 2 GPUs |" in text
        and "distrain doctor: 13 ok · 1 fail" in text
    )


def test_a_step_that_exits_124_itself_is_not_a_timeout(tmp_path: Path) -> None:
    """The watchdog's verdict exits 124, as `timeout` does; on the H100 the hang step was
    reported as timed out after 42 s of its 63. Only a step that reached its limit timed out."""
    lib = REPO / "scripts" / "gpu_checks_steps.sh"
    script = (
        f"out={tmp_path}; steps={tmp_path}/steps.tsv; source {lib}\n"
        "EXPECT=nonzero step verdict 30 bash -c 'exit 124'\n"
        "step stuck 1 sleep 30\n"
        "step fine 30 true\n"
        "STEPS='fine' step other 30 true\n"
    )
    run(["bash", "-c", script], timeout=60, check=True)
    rows = [line.split("\t")[:3] for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert rows == [["verdict", "ok", "124"], ["stuck", "timeout", "124"], ["fine", "ok", "0"]], (
        rows
    )
