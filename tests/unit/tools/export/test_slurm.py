"""tools/export/slurm.py: the requeue-able sbatch script, one `distrain run` per node via srun."""

from __future__ import annotations

import shlex

from distrain.tools.export import slurm
from distrain.tools.export.spec import JobSpec


def _srun(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("srun "))
    return shlex.split(line)


def test_static_job_header() -> None:
    text = slurm.render(
        JobSpec("train.py", min_nodes=4, max_nodes=4, gpus_per_node=8),
        cpus_per_node=32,
        time_warning=300,
    )
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for expected in ("#SBATCH --job-name=train", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1",
                     "#SBATCH --cpus-per-task=32", "#SBATCH --gpus-per-node=8", "#SBATCH --requeue",
                     "#SBATCH --signal=USR1@300", "set -euo pipefail",
                     "MASTER_PORT=${MASTER_PORT:-29500}"):  # fmt: skip
        assert expected in lines, expected


def test_srun_line_uses_the_allocation_and_a_per_job_run_dir() -> None:
    tokens = _srun(slurm.render(JobSpec("train.py", ["--epochs", "2"], nproc_per_node=4)))
    assert tokens[:4] == ["srun", "--kill-on-bad-exit=1", "distrain", "run"]
    after = {tokens[i]: tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i].startswith("--")}
    assert after["--nnodes"] == "$SLURM_JOB_NUM_NODES"
    assert (
        after["--rdzv-backend"] == "c10d"
        and after["--rdzv-endpoint"] == "$MASTER_ADDR:$MASTER_PORT"
    )
    assert after["--rdzv-id"] == "$SLURM_JOB_ID" and after["--run-dir"] == "runs/$SLURM_JOB_ID"
    assert after["--nproc-per-node"] == "4"
    assert tokens[-3:] == ["train.py", "--epochs", "2"]
    assert "--max-restarts" not in tokens


def test_elastic_job_asks_for_a_node_range_and_restarts() -> None:
    text = slurm.render(JobSpec("t.py", min_nodes=2, max_nodes=4, gpus_per_node=0, max_restarts=7))
    assert "#SBATCH --nodes=2-4" in text.splitlines()
    assert not any(line.startswith("#SBATCH --gpus-per-node") for line in text.splitlines())
    tokens = _srun(text)
    assert (
        tokens[tokens.index("--nnodes") + 1] == "2:4"
        and tokens[tokens.index("--max-restarts") + 1] == "7"
    )


def test_port_comes_from_the_job_id_unless_fixed() -> None:
    assert (
        "MASTER_PORT=${MASTER_PORT:-$((15000 + SLURM_JOB_ID % 20000))}"
        in slurm.render(JobSpec("t.py", port=None)).splitlines()
    )
    assert (
        "MASTER_PORT=${MASTER_PORT:-29600}"
        in slurm.render(JobSpec("t.py", port=29600)).splitlines()
    )
