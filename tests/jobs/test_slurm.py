"""SLURM for real: a one-host cluster (munged, slurmctld, slurmd) started from tests/slurm/.

- `srun -n 2` tasks find their rank, world and master from the environment slurmd sets;
- the `distrain export slurm` script, submitted with `sbatch`, trains the digits example;
- on two slurmds in two network namespaces (two "nodes"), the script runs one `distrain run` per
  node and trains digits across both;
- its time-limit warning (SIGUSR1 to the job steps, as `#SBATCH --signal=USR1@N` sends it) and a
  real preemption (a job in a higher-priority partition) each checkpoint, exit and requeue the
  job, which resumes where it stopped: the final parameters equal an uninterrupted run's, bit for
  bit; a job submitted with --no-requeue says so and stays ended.

Skipped with the reason where the daemons cannot start (not root, packages missing).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import EXAMPLES, REPO, digits_accuracy, python, run, session
from helpers.netns_hosts import make_hosts
from helpers.slurm_cluster import (
    SlurmCluster,
    SlurmNode,
    SlurmUnavailable,
    cluster_or_skip,
    start_cluster,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

EPOCHS = 24  # long enough to interrupt twice (~0.3-1 s an epoch here), short enough for CI


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """The running cluster for this test session (stopped at its end)."""
    yield from cluster_or_skip()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _export_digits(
    work: Path, out: Path, ckpt: Path, nodes: int = 1, epochs: int = EPOCHS, port: bool = True
) -> Path:
    """The exported batch script for the digits example, in `work` (its working directory).

    `port`: a free port fixed with --port (one-host clusters of parallel test workers share this
    machine's ports and number their jobs alike); False: the script's own, from the job id.
    The script is named by its absolute path: SLURM has no image, and the nodes share the file.
    """
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "train_digits.py", work / "train_digits.py")
    script = work / "digits.sbatch"
    fixed = ["--port", str(_free_port())] if port else []
    run([python(), "-m", "distrain.cli", "export", "slurm", str(work / "train_digits.py"),
         "--nnodes", str(nodes), "--nproc-per-node",
         str(2 // nodes), "--gpus-per-node", "0", "--cpus-per-node", "2", *fixed, "--name",
         "digits",
         "--out", str(script), "--", "--epochs", str(epochs), "--out", str(out), "--checkpoint-dir",
         str(ckpt)],
        timeout=120, cwd=work, check=True)  # fmt: skip
    return script


def _output(work: Path, job_id: str) -> str:
    path = work / f"digits-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_output(
    slurm: SlurmCluster, work: Path, job_id: str, pattern: str, after: int, timeout: float
) -> int:
    """Wait for `pattern` in the job's output past offset `after`; the offset just past the match"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.compile(pattern).search(_output(work, job_id), after)
        if match:
            return match.end()
        if slurm.job(job_id).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            break
        time.sleep(0.2)
    raise AssertionError(
        f"no {pattern!r} in the output of job "
        f"{job_id}:\n{_output(work, job_id)[-4000:]}\n{slurm.logs()}"
    )


def _wait_requeued(slurm: SlurmCluster, job_id: str, restarts: int, timeout: float = 180) -> None:
    """Wait until SLURM holds the job again after its `restarts`-th requeue, then start it now.

    A requeued job waits ~2 min (its begin time) before it may run again; the test skips that.
    """
    deadline = time.monotonic() + timeout
    info: dict[str, str] = {}
    while time.monotonic() < deadline:
        info = slurm.job(job_id)
        if info.get("JobState") == "PENDING" and int(info.get("Restarts", "0")) == restarts:
            slurm.cmd("scontrol", "update", f"JobId={job_id}", "StartTime=now")
            return
        time.sleep(0.3)
    raise AssertionError(
        f"job {job_id} was not requeued ({restarts}): {info.get('JobState')} {info.get('Reason')}"
    )


def _params(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def uninterrupted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str, str]:
    """The exported digits job run to completion under sbatch: (out dir, job id, its output);
    once per test run, on the cluster of the worker that asks first (a module fixture is made
    once per xdist worker, and a worker needs no cluster of its own just to read it)."""

    def make(work: Path) -> str:
        slurm: SlurmCluster = request.getfixturevalue("slurm")
        shutil.rmtree(work / "ckpt", ignore_errors=True)  # a failed try left it
        script = _export_digits(work, work / "out", work / "ckpt")
        job_id = slurm.sbatch(script, cwd=work)
        info = slurm.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 400)
        text = _output(work, job_id)
        assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (
            f"{info.get('JobState')} {info.get('ExitCode')}\n{text[-4000:]}"
        )
        return json.dumps([str(work / "out"), job_id, text])

    out, job_id, text = json.loads(session.once(tmp_path_factory, "slurm-digits", make))
    return Path(out), job_id, text


def test_srun_tasks_detect_slurm_from_slurmd_environment(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "ranks"
    res = slurm.cmd("srun", "-n", "2", "--cpus-per-task=1", python(),
                    str(REPO / "tests" / "scripts" / "core_job.py"),
                    "--out", str(out), "--mode", "train", timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + slurm.logs()
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["launcher"] for r in ranks] == ["slurm", "slurm"]
    assert [(r["rank"], r["world_size"], r["local_rank"]) for r in ranks] == [(0, 2, 0), (1, 2, 1)]
    # one process group over both tasks: DDP made the different initial weights equal and kept them
    # so
    assert ranks[0]["initial"] == ranks[1]["initial"] and ranks[0]["final"] == ranks[1]["final"]
    assert ranks[0]["final"] != ranks[0]["initial"]


def test_sbatch_exported_script_trains_digits(uninterrupted: tuple[Path, str, str]) -> None:
    out, job_id, text = uninterrupted
    assert "on 2 process(es)" in text and digits_accuracy(text) > 0.9, text[-3000:]
    assert f"job {job_id} (start 0): 1 node(s)" in text and f"epoch {EPOCHS}/{EPOCHS}" in text


@pytest.mark.netns
def test_two_slurmd_nodes_in_namespaces_train_digits(tmp_path: Path) -> None:
    with make_hosts(2) as hosts:
        nodes = [
            SlurmNode(f"{hosts.names[i]}-slurm", hosts.addrs[i], hosts.names[i]) for i in range(2)
        ]
        try:
            cluster = start_cluster(nodes)
        except SlurmUnavailable as err:
            pytest.skip(f"no two-node SLURM cluster: {err}")
        try:
            work, out = tmp_path / "job", tmp_path / "out"
            # the namespaces' ports are theirs alone: the script takes its port from the job id
            script = _export_digits(work, out, tmp_path / "ckpt", nodes=2, epochs=2, port=False)
            job_id = cluster.sbatch(script, cwd=work)
            info = cluster.wait_state(
                job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=400
            )
            text = _output(work, job_id)
            assert info["JobState"] == "COMPLETED", (
                f"{info.get('JobState')} {info.get('ExitCode')}\n{text[-4000:]}"
            )
            assert info["NumNodes"] == "2", info
            # cluster/slurm.py's rule, so two jobs sharing a node do not collide
            assert f"master {nodes[0].name}:{15000 + int(job_id) % 20000};" in text, text[-3000:]
            assert "2 processes on 2 nodes" in text, text[-3000:]
            assert "on 2 process(es)" in text and (out / "model.pt").is_file(), text[-3000:]
        finally:
            cluster.stop()


def test_time_limit_warning_then_preemption_requeue_and_resume_exactly(
    slurm: SlurmCluster, uninterrupted: tuple[Path, str, str], tmp_path: Path
) -> None:
    work = tmp_path / "job"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    script = _export_digits(work, out, ckpt)
    assert (
        "#SBATCH --signal=USR1@120" in script.read_text()
        and "#SBATCH --requeue" in script.read_text()
    )
    job_id = slurm.sbatch(script, cwd=work)
    # 1. the time-limit warning: SIGUSR1 to every process of the job's steps, not the batch shell,
    #    exactly how `#SBATCH --signal=USR1@N` delivers it (without waiting for a real limit)
    seen = _wait_output(slurm, work, job_id, r"epoch 2/", 0, timeout=300)
    slurm.cmd("scancel", "--signal=USR1", job_id)
    seen = _wait_output(
        slurm,
        work,
        job_id,
        r"requeued after its checkpoint \(time-limit warning \(SIGUSR1\)\)",
        seen,
        timeout=120,
    )
    _wait_requeued(slurm, job_id, restarts=1)
    # 2. a real preemption: a job in the higher-priority partition needs the CPUs; SLURM sends
    #    SIGTERM
    seen = _wait_output(slurm, work, job_id, r"resumed from .*step_\d+", seen, timeout=300)
    seen = _wait_output(slurm, work, job_id, r"epoch \d+/", seen, timeout=300)
    urgent = slurm.sbatch_wrap("true", "--partition=high", "--cpus-per-task=2", cwd=work)
    seen = _wait_output(
        slurm,
        work,
        job_id,
        r"requeued after its checkpoint \(preemption \(SIGTERM\)\)",
        seen,
        timeout=120,
    )
    slurm.wait_state(urgent, {"COMPLETED"}, timeout=120)
    _wait_requeued(slurm, job_id, restarts=2)
    info = slurm.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=400)
    text = _output(work, job_id)
    assert info["JobState"] == "COMPLETED", text[-4000:]
    assert text.count("resumed from") == 2 and f"job {job_id} (start 2)" in text, text[-4000:]
    # resumed exactly where it stopped, twice: every parameter equals the uninterrupted run's
    reference, mine = _params(uninterrupted[0]), _params(out)
    assert reference.keys() == mine.keys()
    for name in reference:
        assert torch.equal(reference[name], mine[name]), f"{name} differs after two requeues"


def test_job_without_requeue_says_so(slurm: SlurmCluster, tmp_path: Path) -> None:
    work = tmp_path / "job"
    script = _export_digits(work, tmp_path / "out", tmp_path / "ckpt")
    job_id = slurm.sbatch(script, "--no-requeue", cwd=work)
    _wait_output(slurm, work, job_id, r"epoch 2/", 0, timeout=300)
    slurm.cmd("scancel", "--signal=USR1", job_id)
    info = slurm.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
    text = _output(work, job_id)
    assert (
        f"SLURM job {job_id} is not requeue-able (sbatch --no-requeue or JobRequeue=0)" in text
    ), text[-3000:]
    assert info.get("Restarts") == "0" and "checkpoint at step" in text
    assert list((tmp_path / "ckpt").glob("step_*")), "the checkpoint was written anyway"
