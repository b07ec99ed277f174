"""Story 2: the same script under every launcher, on gloo, real processes.

distrain run runs at 2 and 3 ranks; every other launcher at one of the two (both sizes are covered
and each launcher is covered once: its rank and world variables do not depend on the size).

Each job trains the same float64 model with the same *global* batch (12 samples) and must end
with exactly the parameters of a single-process run (1e-6 relative), identical on every rank.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch
from helpers import REPO, python, run, session

from distrain.net import port_in_use

JOB = str(REPO / "tests" / "scripts" / "core_job.py")
GLOBAL_BATCH = 12


def read_ranks(out: Path, world: int) -> list[dict]:
    files = sorted(out.glob("rank*.json"))
    assert len(files) == world, f"expected {world} rank files, got {[f.name for f in files]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def assert_close(a: list, b: list) -> None:
    for ta, tb in zip(a, b, strict=True):
        ta, tb = torch.tensor(ta, dtype=torch.float64), torch.tensor(tb, dtype=torch.float64)
        assert torch.allclose(ta, tb, rtol=1e-6, atol=1e-9), (ta - tb).abs().max()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One plain process, global batch 12: the result every launcher must reproduce; made once
    per test run (a module fixture is made once per xdist worker)."""

    def make(out: Path) -> str:
        for stale in out.glob("rank*.json"):  # a failed try left it
            stale.unlink()
        res = run(
            [python(), JOB, "--out", str(out), "--batch-size", str(GLOBAL_BATCH)],
            timeout=120,
            check=True,
        )
        (result,) = read_ranks(out, 1)
        assert result["launcher"] == "single" and result["backend"] is None, res.stdout
        return json.dumps(result)

    return dict(json.loads(session.once(tmp_path_factory, "launchers-reference", make)))


def check_job(out: Path, world: int, launcher: str, reference: dict) -> list[dict]:
    results = read_ranks(out, world)
    for r, res in enumerate(results):
        assert res["rank"] == r and res["world_size"] == world
        assert res["launcher"] == launcher
        assert res["backend"] == "gloo"
        assert_close(res["final"], reference["final"])
        assert res["final"] == results[0]["final"], "ranks disagree"
    threads = [p.read_text() for p in out.glob("threads.*")]
    assert threads == ["group threads at exit: []\n"] * world, threads  # nothing outlived shutdown
    return results


def slurm_env(rank: int, world: int, job_id: int) -> dict[str, str]:
    return {
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(world),
        "SLURM_LOCALID": str(rank),
        "SLURM_NODEID": "0",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS_PER_NODE": str(world),
        "SLURM_NODELIST": "localhost",
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NAME": "train",
    }


def free_slurm_job_id() -> int:
    while True:
        job_id = random.randint(1, 19999)
        if not port_in_use(15000 + job_id):
            return job_id


@pytest.mark.parametrize("world", [2, 3])
def test_distrain_run(tmp_path: Path, world: int, reference: dict) -> None:
    """Also: `--n` and `--log` (prefixes of torchrun flags) reach the script untouched, and each
    rank's differently seeded model leaves prepare_model with rank 0's weights everywhere."""
    run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            str(world),
            JOB,
            "--out",
            str(tmp_path),
            "--n",
            "5",
            "--log",
            "x",
            "--batch-size",
            str(GLOBAL_BATCH // world),
        ],
        timeout=180,
        check=True,
    )
    results = check_job(tmp_path, world, "torchelastic", reference)
    assert all(res["initial"] == results[0]["initial"] for res in results), (
        "prepare_model did not broadcast"
    )
    for res in results:
        assert res["n"] == 5 and res["log"] == "x"
        assert "--" not in res["argv"], "a separator leaked into the script's argv"


@pytest.mark.parametrize("world", [3])
def test_torchrun(tmp_path: Path, world: int, reference: dict) -> None:
    run(
        [
            python(),
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(world),
            JOB,
            "--out",
            str(tmp_path),
            "--batch-size",
            str(GLOBAL_BATCH // world),
        ],
        timeout=180,
        check=True,
    )
    check_job(tmp_path, world, "torchelastic", reference)


@pytest.mark.parametrize(("world", "use_env"), [(2, False), (3, True)])
def test_legacy_torch_distributed_launch(
    tmp_path: Path, world: int, use_env: bool, reference: dict
) -> None:
    cmd = [
        python(),
        "-m",
        "torch.distributed.launch",
        "--nproc-per-node",
        str(world),
        "--master-port",
        str(free_slurm_job_id() + 15000),
    ]
    cmd += ["--use-env"] if use_env else []
    run(
        cmd + [JOB, "--out", str(tmp_path), "--batch-size", str(GLOBAL_BATCH // world)],
        timeout=180,
        check=True,
    )
    results = check_job(
        tmp_path, world, "torch.distributed.launch" if not use_env else "torchelastic", reference
    )
    for r, res in enumerate(results):
        assert res["local_rank"] == r
        assert not any(a.startswith("--local") for a in res["argv"]), (
            "launcher's --local-rank leaked to argparse"
        )


@pytest.mark.parametrize("world", [2])
def test_distrain_spawn(tmp_path: Path, world: int, reference: dict) -> None:
    run(
        [
            python(),
            str(REPO / "tests" / "scripts" / "spawn_job.py"),
            str(world),
            "--out",
            str(tmp_path),
            "--batch-size",
            str(GLOBAL_BATCH // world),
        ],
        timeout=180,
        check=True,
    )
    check_job(tmp_path, world, "spawn", reference)


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="Open MPI not installed (apt-get install openmpi-bin)"
)
@pytest.mark.parametrize("world", [3])
def test_mpirun(tmp_path: Path, world: int, reference: dict) -> None:
    pytest.importorskip("mpi4py")
    run(
        [
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            str(world),
            python(),
            JOB,
            "--out",
            str(tmp_path),
            "--batch-size",
            str(GLOBAL_BATCH // world),
        ],
        timeout=180,
        check=True,
    )
    check_job(tmp_path, world, "openmpi", reference)


@pytest.mark.parametrize("world", [2])
def test_slurm_env_contract(tmp_path: Path, world: int, reference: dict) -> None:
    """srun is not installed here: start the tasks ourselves with the variables srun sets."""
    job_id = free_slurm_job_id()
    _start_ranks(tmp_path, world, lambda rank: slurm_env(rank, world, job_id))
    check_job(tmp_path, world, "slurm", reference)


def test_single_process(reference: dict) -> None:
    """The same script as `python train.py`: no process group, still trains."""
    assert reference["world_size"] == 1
    assert reference["final"] != reference["initial"]


def test_plain_torchrun_script_under_distrain_run(tmp_path: Path) -> None:
    run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            str(REPO / "tests" / "scripts" / "plain_torchrun.py"),
            str(tmp_path),
        ],
        timeout=180,
        check=True,
    )
    assert sorted(p.read_text() for p in tmp_path.glob("plain*.txt")) == ["2 3.0 0", "2 3.0 1"]


def test_legacy_local_rank_flag(tmp_path: Path) -> None:
    """`--legacy-local-rank` gives old scripts the `--local_rank=N` they parse."""
    run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            "--legacy-local-rank",
            str(REPO / "tests" / "scripts" / "old_style.py"),
            str(tmp_path),
        ],
        timeout=180,
        check=True,
    )
    assert sorted(p.read_text() for p in tmp_path.glob("old*.txt")) == ["0 0", "1 1"]


def _start_ranks(tmp_path: Path, world: int, env_of: object) -> list[str]:
    """Start `world` real processes of the job with the variables a launcher would set."""
    import subprocess

    procs = []
    for rank in range(world):
        env = dict(os.environ, **env_of(rank))  # type: ignore[operator]
        procs.append(
            subprocess.Popen(
                [python(), JOB, "--out", str(tmp_path), "--batch-size", str(GLOBAL_BATCH // world)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    try:
        outputs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    assert all(p.returncode == 0 for p in procs), outputs
    return outputs


def test_mpich_env_contract(tmp_path: Path, reference: dict) -> None:
    """MPICH / Intel MPI (Hydra) variables, with MASTER_ADDR/PORT given as users do with -genv."""
    port = free_slurm_job_id() + 15000
    _start_ranks(
        tmp_path,
        2,
        lambda r: {
            "PMI_RANK": str(r),
            "PMI_SIZE": "2",
            "MPI_LOCALRANKID": str(r),
            "MPI_LOCALNRANKS": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        },
    )
    check_job(tmp_path, 2, "mpich", reference)


def test_mpi_without_master_or_mpi4py_is_one_line(tmp_path: Path) -> None:
    """No MASTER_ADDR/PORT and no mpi4py: one line naming exactly what to set, no hang."""
    shadow = tmp_path / "shadow" / "mpi4py"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('mpi4py hidden by the test')\n")
    env = {
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{os.environ['PYTHONPATH']}",
    }
    res = run([python(), JOB, "--out", str(tmp_path)], timeout=120, env=env)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "distrain: error: openmpi: set MASTER_ADDR and MASTER_PORT" in res.stderr, res.stderr


def test_lsf_env_contract(tmp_path: Path, reference: dict) -> None:
    """jsrun is not installed here: two tasks with its variables, laid out as two nodes of one task
    each, the master taken from LSF's host file (its first line, the launch node, skipped)."""
    job_id = free_slurm_job_id()  # the same port rule as SLURM: 15000 + job id % 20000
    hostfile = tmp_path / "djob_hosts"
    hostfile.write_text("launch-node\n127.0.0.1\n127.0.0.2\n")
    _start_ranks(
        tmp_path,
        2,
        lambda r: {
            "JSM_NAMESPACE_RANK": str(r),
            "JSM_NAMESPACE_SIZE": "2",
            "JSM_NAMESPACE_LOCAL_RANK": "0",
            "JSM_NAMESPACE_LOCAL_SIZE": "1",
            "LSB_JOBID": str(job_id),
            "LSB_DJOB_HOSTFILE": str(hostfile),
        },
    )
    check_job(tmp_path, 2, "lsf", reference)


def test_kubeflow_env_contract(tmp_path: Path, reference: dict) -> None:
    """Two PyTorchJob pods running `python train.py` (no torchrun): the operator's four variables,
    no LOCAL_RANK, and the kubelet's KUBERNETES_SERVICE_HOST."""
    port = free_slurm_job_id() + 15000
    _start_ranks(
        tmp_path,
        2,
        lambda r: {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        },
    )
    check_job(tmp_path, 2, "kubeflow", reference)


def test_torchrun_inside_a_pod_stays_torchrun(tmp_path: Path, reference: dict) -> None:
    """A PyTorchJob whose command is torchrun (what `distrain export k8s` writes, through distrain
    run): the pod's operator variables are overwritten for the workers, LOCAL_RANK is added, and
    the workers are torchrun's, not one process per pod."""
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_slurm_job_id() + 15000)}  # fmt: skip
    run([python(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", JOB,
         "--out", str(tmp_path),
         "--batch-size", str(GLOBAL_BATCH // 2)], timeout=180, env=pod, check=True)  # fmt: skip
    check_job(tmp_path, 2, "torchelastic", reference)
