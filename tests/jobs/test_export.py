"""`distrain export`: generated files parse and say what the job needs.

No docker engine, SLURM or Kubernetes runs on the build machines: the files are checked
statically (YAML structure, `bash -n`, Dockerfile lines) and the SLURM script's shell logic is
executed with stand-in `scontrol`/`srun` commands that record what they were asked to run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO, python, run

from distrain.export.cli import main as export_main

SCRIPT = "examples/train_digits.py"


def export(capsys: pytest.CaptureFixture[str], *argv: str, cwd: Path = REPO) -> str:
    """Run `distrain export` in-process from `cwd` (the repository root); its stdout."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        assert export_main(list(argv)) == 0
    finally:
        os.chdir(here)
    return capsys.readouterr().out


def test_compose_two_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(export(capsys, "compose", SCRIPT, "--nproc-per-node", "2", "--image", "me/job:1", "--", "--epochs", "3"))
    services = doc["services"]
    assert list(services) == ["node0", "node1"]
    for rank, (name, svc) in enumerate(services.items()):
        assert svc["image"] == "me/job:1" and svc["hostname"] == name and svc["ipc"] == "host"
        cmd = svc["command"]
        assert cmd[:2] == ["distrain", "run"] and cmd[-3:] == [SCRIPT, "--epochs", "3"]
        opts = dict(zip(cmd[2:-3:2], cmd[3:-3:2], strict=True))
        assert opts["--nnodes"] == "2" and opts["--node-rank"] == str(rank) and opts["--nproc-per-node"] == "2"
        assert opts["--master-addr"] == "node0" and opts["--master-port"] == "29500"
        assert svc["environment"]["GLOO_SOCKET_IFNAME"] == "eth0"
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "device_ids": [str(2 * rank), str(2 * rank + 1)], "capabilities": ["gpu"]}]
    assert "build" in services["node0"] and services["node1"]["depends_on"] == ["node0"]


def test_compose_elastic_and_cpu_only(capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(export(capsys, "compose", SCRIPT, "--nnodes", "1:3", "--gpus-per-node", "0"))
    assert len(doc["services"]) == 3
    cmd = doc["services"]["node2"]["command"]
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d" and cmd[cmd.index("--nnodes") + 1] == "1:3"
    assert "--node-rank" not in cmd and all("deploy" not in s for s in doc["services"].values())


def test_k8s_static_master_and_workers(capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(export(capsys, "k8s", SCRIPT, "--nnodes", "4", "--nproc-per-node", "8", "--image", "reg/x:2", "--name", "Digits_Run"))
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    assert doc["metadata"]["name"] == "digits-run"
    spec = doc["spec"]
    assert "elasticPolicy" not in spec and spec["nprocPerNode"] == "8"
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    for role in ("Master", "Worker"):
        pod = replicas[role]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "pytorch" and container["image"] == "reg/x:2"
        assert container["command"][:2] == ["distrain", "run"] and container["command"][-1] == SCRIPT
        assert {"name": "PYTHONUNBUFFERED", "value": "1"} in container["env"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def test_k8s_elastic_policy_for_a_range(capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(export(capsys, "k8s", SCRIPT, "--nnodes", "2:5", "--gpus-per-node", "0"))
    policy = doc["spec"]["elasticPolicy"]
    assert policy == {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 5, "maxRestarts": 3}
    assert list(doc["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 5 and "resources" not in worker["template"]["spec"]["containers"][0]


def test_slurm_script_syntax_and_logic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = export(capsys, "slurm", SCRIPT, "--nnodes", "2", "--nproc-per-node", "4", "--", "--lr", "0.1")
    assert re.search(r"^#SBATCH --nodes=2$", text, re.M) and re.search(r"^#SBATCH --ntasks-per-node=1$", text, re.M)
    assert re.search(r"^#SBATCH --gpus-per-node=4$", text, re.M)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30).returncode == 0
    # stand-ins for the SLURM commands: scontrol lists the nodes, srun records its command line
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a17\\ngpu-a18\\n"\n')
    (bin_dir / "srun").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path}/srun.args\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_NODELIST="gpu-a[17-18]", SLURM_JOB_ID="4242",
               SLURM_JOB_NUM_NODES="2", SLURM_CPUS_PER_TASK="8")  # fmt: skip
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    args = (tmp_path / "srun.args").read_text().splitlines()
    assert args[:2] == ["--kill-on-bad-exit=1", "distrain"] and args[2] == "run"
    opts = dict(zip(args[3:-3:2], args[4:-3:2], strict=True))
    assert opts["--nnodes"] == "2" and opts["--rdzv-backend"] == "c10d"
    assert opts["--rdzv-endpoint"] == "gpu-a17:29500" and opts["--rdzv-id"] == "4242"
    assert opts["--nproc-per-node"] == "4" and opts["--run-dir"] == "runs/4242"
    assert args[-3:] == [SCRIPT, "--lr", "0.1"]


def test_slurm_requeue_and_time_warning(capsys: pytest.CaptureFixture[str]) -> None:
    text = export(capsys, "slurm", SCRIPT, "--nnodes", "1", "--gpus-per-node", "0")
    for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=USR1@120"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^trap .* USR1 TERM$", text, re.M)  # the batch shell waits for the checkpoint
    assert "#SBATCH --signal=USR1@45\n" in export(capsys, "slurm", SCRIPT, "--time-warning", "45")


def test_slurm_elastic_and_cpu_only(capsys: pytest.CaptureFixture[str]) -> None:
    text = export(capsys, "slurm", SCRIPT, "--nnodes", "1:4", "--gpus-per-node", "0")
    assert "#SBATCH --nodes=1-4" in text and "--gpus-per-node" not in text
    assert "--nnodes 1:4" in text and "--max-restarts 3" in text


def test_dockerfile_base_image_and_install(capsys: pytest.CaptureFixture[str]) -> None:
    lines = export(capsys, "docker", SCRIPT, "--", "--epochs", "2").splitlines()
    code = [line for line in lines if line and not line.startswith("#")]
    assert re.fullmatch(r"FROM pytorch/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-runtime", code[0]), code[0]
    assert 'RUN python -m pip install "distrain"' in code
    assert code.index('RUN python -m pip install "distrain"') < code.index("COPY . /workspace")  # cached pip layer
    assert code[-2] == 'ENTRYPOINT ["distrain", "run"]'
    cmd = json.loads(code[-1].removeprefix("CMD "))
    assert cmd[:2] == ["--nproc", "auto"] and cmd[-3:] == [SCRIPT, "--epochs", "2"]
    assert any("docker run --gpus all --ipc=host" in line for line in lines)


def test_repo_docker_files_are_the_generated_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docker/Dockerfile and docker/compose.yaml are exactly what `distrain export` writes."""
    (tmp_path / "examples").mkdir()
    (tmp_path / SCRIPT).write_text((REPO / SCRIPT).read_text())
    for argv in (
        ["docker", SCRIPT, "--install", ".[examples]", "--image", "distrain:latest", "--out", "docker/Dockerfile"],
        ["compose", SCRIPT, "--image", "distrain:latest", "--context", "..", "--dockerfile", "docker/Dockerfile", "--out", "docker/compose.yaml"],
    ):
        assert export(capsys, *argv, cwd=tmp_path) == ""  # went to the file
        assert (tmp_path / argv[-1]).read_text() == (REPO / argv[-1]).read_text(), f"regenerate {argv[-1]}: distrain export {shlex.join(argv)}"
    text = (REPO / "docker/Dockerfile").read_text()
    assert "docker build -f docker/Dockerfile" in text
    assert "COPY . /workspace" in text and 'RUN python -m pip install ".[examples]"' in text
    compose = yaml.safe_load((REPO / "docker/compose.yaml").read_text())
    assert compose["services"]["node0"]["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["k8s", "missing.py"], "script not found: missing.py"),
        (["slurm", "/abs/train.py"], "relative to the project directory"),
        (["compose", SCRIPT, "--nnodes", "3:1"], "MIN:MAX"),
        (["compose", SCRIPT, "--nnodes", "two"], "N or MIN:MAX"),
        (["helm", SCRIPT], "invalid choice"),
        (["docker", SCRIPT, "--nproc-per-node", "0"], "at least 1"),
        (["slurm", SCRIPT, "--time-warning", "0"], "--time-warning must be 1..65535 seconds"),
    ],
)
def test_bad_input_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with pytest.raises(SystemExit) as exc:
            export_main(argv)
    finally:
        os.chdir(cwd)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distrain export: error:") and message in err[0], err


def test_cli_writes_file(tmp_path: Path) -> None:
    out = tmp_path / "deploy" / "job.sbatch"
    res = run([python(), "-m", "distrain.cli", "export", "slurm", SCRIPT, "--out", str(out)], timeout=120, cwd=REPO, check=True)
    assert res.stdout == "" and f"wrote {out}" in res.stderr
    assert os.access(out, os.X_OK) and out.read_text().startswith("#!/bin/bash")
    assert shlex.split(out.read_text().splitlines()[-1])[0] == "srun"
