"""A failing `distrain run --cpu` rehearsal ends with its cause on the last line: the script's
exception, or the reason a call needs a real GPU."""

from __future__ import annotations

from pathlib import Path

from helpers import python, run


def test_a_failing_rehearsal_ends_with_its_cause(tmp_path: Path) -> None:
    """The `--cpu` summary ("mapped in N processes: …") comes before the verdict, never after it:
    the chaos campaign saw it as a failed job's last line."""
    script = tmp_path / "fails.py"
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "x = torch.ones(2).cuda()\n"
        "if dist.get_rank() == 1:\n"
        "    raise RuntimeError('the cause, after a mapped call')\n"
        "dist.barrier()\n"
    )
    res = run([python(), "-m", "distrain.cli", "run", "--cpu", "-n", "2", str(script)], timeout=240)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("distrain run: job failed") and "the cause" in last, res.stderr[-2000:]
    assert "mapped in" in res.stderr


def test_a_refused_call_is_the_jobs_last_line(tmp_path: Path) -> None:
    """What needs a real GPU stops the job with its reason on the last line, not only above it."""
    script = tmp_path / "graphs.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "g = torch.cuda.CUDAGraph()\n"
    )
    res = run([python(), "-m", "distrain.cli", "run", "--cpu", "-n", "2", str(script)], timeout=240)
    assert res.returncode == 3, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("distrain run: job failed"), res.stderr[-2000:]
    assert "cannot rehearse torch.cuda.CUDAGraph() (CUDA graphs) at " in last, last
    assert "graphs.py:3: it needs a real GPU" in last, last
