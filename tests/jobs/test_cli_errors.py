"""Bad input to `distrain run`: one clear line on stderr, non-zero exit, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from helpers import REPO, distrain_run, python, run

JOB = str(REPO / "tests" / "scripts" / "core_job.py")


def assert_one_line_error(code: int, stderr: str, needle: str) -> None:
    assert code != 0
    assert "Traceback" not in stderr
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("distrain run: error:") and needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--frobnicate", JOB], "unknown option --frobnicate"),
        (["-n", "2", "no/such/script.py"], "script not found: no/such/script.py"),
        (["-n", "0", JOB], "at least 1"),
        (["-n", "two", JOB], "--nproc expects an integer"),
        (["--gpus", "7", JOB], "GPU 7 does not exist"),
        (["--gpus", "a,b", JOB], "--gpus expects GPU indices"),
        ([], "no training script"),
        (["--nprocs", "2", JOB], "unknown option --nprocs: did you mean --nproc?"),
        (["--max", "3", JOB], "ambiguous option: --max could match --max-restarts"),
        (["--launcher", "srun", JOB], "argument --launcher: invalid choice: 'srun'"),
    ],
)
def test_bad_input(args: list[str], needle: str) -> None:
    res = distrain_run(*args, timeout=120)
    assert_one_line_error(res.returncode, res.stderr, needle)


def test_port_in_use() -> None:
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        res = distrain_run(
            "-n", "2", "--master-port", str(port), JOB, "--out", "/nonexistent", timeout=120
        )
    assert_one_line_error(res.returncode, res.stderr, f"port {port} is already in use")


def test_unknown_command() -> None:
    res = run([python(), "-m", "distrain.cli", "frobnicate"], timeout=60)
    assert res.returncode == 2 and "unknown command" in res.stderr and "Traceback" not in res.stderr


def test_exit_code_is_the_jobs(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    res = distrain_run("-n", "2", str(script), timeout=120)
    assert res.returncode == 3, res.stderr
    assert "rank 1" in res.stderr and "exited with code 3" in res.stderr


def test_dry_run_prints_torchrun_command() -> None:
    res = distrain_run("--dry-run", "-n", "2", JOB, "--n", "5", timeout=120)
    code, out = res.returncode, res.stdout
    assert code == 0
    assert (
        "torchrun" in out
        and "--nproc-per-node 2" in out
        and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in out
    )
    assert out.strip().endswith("-- --n 5")


def test_a_usage_error_imports_no_torch() -> None:
    """The typo is refused from the recorded torchrun table (launch/options/usage.py), not after the
    seconds of `import torch`."""
    res = run(
        [python(), "-X", "importtime", "-m", "distrain.cli", "run", "--max-restrats", "3", JOB],
        timeout=120,
    )
    imported = [ln.split("|")[-1].strip() for ln in res.stderr.splitlines() if "|" in ln]
    said = [ln for ln in res.stderr.splitlines() if not ln.startswith("import time:")]
    assert res.returncode == 2 and len(said) == 1, res.stderr[-2000:]
    assert said[0].startswith("distrain run: error: unknown option --max-restrats: did you mean")
    assert "distrain.launch.options.usage" in imported  # the table was read
    assert "torch" not in imported, "torch was imported on the usage-error path"


def test_torchruns_abbreviation_is_taken() -> None:
    res = distrain_run("--dry-run", "--max-restart", "2", "-n", "2", JOB, "--max", timeout=120)
    code, out, err = res.returncode, res.stdout, res.stderr
    assert code == 0, err
    assert "--max-restarts 2" in out and out.strip().endswith("-- --max")
