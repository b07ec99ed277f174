"""`distrain export`: the files deploy as written, checked by real tools where one installs here.

No docker engine or Kubernetes runs on the build machines, so those files are checked by the
tools' own validators (tests/helpers/manifests.py): BuildKit's Dockerfile parser, the Compose
Specification schema (check-jsonschema), the Kubernetes API schemas (kubernetes-validate) and
the Kubeflow training SDK's PyTorchJob models. The Dockerfile's distrain wheel is really built
and installed. The SLURM script's shell logic runs here with stand-in `scontrol`/`srun`, and under
the real slurmd in tests/jobs/test_slurm.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO, python, run
from helpers.manifests import compose_errors, k8s_errors, need

from distrain import __version__
from distrain.tools.export.base_image import for_installed_torch
from distrain.tools.export.cli import main as export_main

SCRIPT = "examples/train_digits.py"


def export_both(
    capsys: pytest.CaptureFixture[str], *argv: str, cwd: Path = REPO
) -> tuple[str, str]:
    """Run `distrain export` in-process from `cwd` (the repository root); its stdout and stderr."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        assert export_main(list(argv)) == 0
    finally:
        os.chdir(here)
    captured = capsys.readouterr()
    return captured.out, captured.err


def export(capsys: pytest.CaptureFixture[str], *argv: str, cwd: Path = REPO) -> str:
    """Run `distrain export` in-process from `cwd`; its stdout."""
    return export_both(capsys, *argv, cwd=cwd)[0]


def _project(tmp_path: Path) -> Path:
    """A user's project outside distrain's tree: the digits script and its requirements."""
    (tmp_path / "examples").mkdir()
    (tmp_path / SCRIPT).write_text((REPO / SCRIPT).read_text())
    (tmp_path / "examples" / "requirements.txt").write_text("scikit-learn>=1.3\n")
    return tmp_path


def test_dockerfile_installs_a_built_wheel_and_the_scripts_requirements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    need("dockerfile", "dockerfile")
    import dockerfile

    project = _project(tmp_path)
    out, err = export_both(
        capsys, "docker", SCRIPT, "--out", "Dockerfile", "--", "--epochs", "2", cwd=project
    )
    assert out == ""
    wheel = f"wheels/distrain-{__version__}-py3-none-any.whl"
    assert "wrote Dockerfile, .dockerignore" in err and "docker run --gpus all --ipc=host" in err, (
        err
    )
    commands = dockerfile.parse_string((project / "Dockerfile").read_text())  # BuildKit's parser
    by_cmd = [(c.cmd, c.value) for c in commands]
    assert by_cmd[0] == ("FROM", (for_installed_torch(),))  # this machine's torch
    for cmd, value in by_cmd:
        if cmd == "COPY":  # every source is in the build context and not ignored
            assert (project / value[0]).exists() and value[0].split("/")[0] not in (
                project / ".dockerignore"
            ).read_text().split(), value
        if (
            cmd == "RUN" and "pip install" in value[0]
        ):  # a file the Dockerfile copied, never an index name
            target = shlex.split(value[0])[-1]
            assert target.startswith("/tmp/"), value
    assert ("COPY", (wheel, f"/tmp/wheels/{Path(wheel).name}")) in by_cmd
    assert ("COPY", ("examples/requirements.txt", "/tmp/requirements.txt")) in by_cmd
    assert by_cmd.index(("COPY", (".", "/workspace"))) > by_cmd.index(
        ("COPY", (wheel, f"/tmp/wheels/{Path(wheel).name}"))
    )
    entry = next(c for c in commands if c.cmd == "ENTRYPOINT")
    cmd = next(c for c in commands if c.cmd == "CMD")
    assert (
        entry.json
        and entry.value == ("distrain", "run")
        and cmd.json
        and cmd.value[-3:] == (SCRIPT, "--epochs", "2")
    )
    # the wheel is real: it installs without an index and imports as this version
    target = tmp_path / "site"
    run(
        [
            python(),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(project / wheel),
        ],
        timeout=180,
        check=True,
    )
    res = run(
        [python(), "-c", "import distrain; print(distrain.__version__, distrain.__file__)"],
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
        timeout=60,
    )
    assert res.stdout.split() == [__version__, str(target / "distrain" / "__init__.py")], res.stderr


def test_compose_on_the_host_network_spans_machines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = export(
        capsys,
        "compose",
        SCRIPT,
        "--nproc-per-node",
        "2",
        "--image",
        "me/job:1",
        "--gpus-per-node",
        "2",
        "--",
        "--epochs",
        "3",
    )
    (tmp_path / "compose.yaml").write_text(text)
    assert compose_errors(tmp_path / "compose.yaml") is None
    services = yaml.safe_load(text)["services"]
    for rank, svc in enumerate(services.values()):
        assert (
            svc["network_mode"] == "host" and svc["ipc"] == "host" and "environment" not in svc
        )  # no eth0 written in
        cmd = svc["command"]
        opts = dict(zip(cmd[2:-3:2], cmd[3:-3:2], strict=True))
        assert opts["--node-rank"] == str(rank) and opts["--master-addr"].startswith(
            "${MASTER_ADDR:?"
        )
        assert svc["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 2
    # the schema has teeth: a misspelled key fails
    (tmp_path / "bad.yaml").write_text(text.replace("network_mode:", "network_mod:", 1))
    assert "network_mod" in (compose_errors(tmp_path / "bad.yaml") or "")


def test_compose_bridge_elastic_and_cpu_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = export(
        capsys, "compose", SCRIPT, "--nnodes", "1:3", "--gpus-per-node", "0", "--network", "bridge"
    )
    (tmp_path / "compose.yaml").write_text(text)
    assert compose_errors(tmp_path / "compose.yaml") is None
    doc = yaml.safe_load(text)
    cmd = doc["services"]["node2"]["command"]
    assert (
        cmd[cmd.index("--rdzv-endpoint") + 1] == "node0:29500"
        and cmd[cmd.index("--nnodes") + 1] == "1:3"
    )
    assert "--node-rank" not in cmd and all(
        "deploy" not in s and "network_mode" not in s for s in doc["services"].values()
    )


@pytest.mark.parametrize("nnodes", ["4", "2:5"])
def test_k8s_pytorchjob_validates_with_a_shared_claim(
    nnodes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = export(
        capsys,
        "k8s",
        SCRIPT,
        "--nnodes",
        nnodes,
        "--nproc-per-node",
        "8",
        "--image",
        "reg.example:5000/me/x:2",
        "--name",
        "Digits_Run",
    )
    docs = list(yaml.safe_load_all(text))
    assert k8s_errors(docs) == []
    claim, job = docs
    assert claim["kind"] == "PersistentVolumeClaim" and claim["spec"]["accessModes"] == [
        "ReadWriteMany"
    ]
    assert job["metadata"]["name"] == "digits-run" and job["spec"]["runPolicy"]["backoffLimit"] == 3
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        assert (
            replica["restartPolicy"] == "OnFailure"
            and pod["containers"][0]["image"] == "reg.example:5000/me/x:2"
        )
        assert {
            "name": "runs",
            "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
        } in pod["volumes"]
    if ":" in nnodes:
        assert job["spec"]["elasticPolicy"] == {
            "rdzvBackend": "c10d",
            "minReplicas": 2,
            "maxReplicas": 5,
            "maxRestarts": 3,
        }
    # the validators have teeth: a misspelled field, a wrong type and a broken volume all fail
    job["spec"]["elasticPolicies"] = {}
    claim["spec"]["accessModes"] = "ReadWriteMany"
    pod["volumes"][1]["persistentVolumeClaim"] = {"claim": "x"}
    found = "\n".join(k8s_errors(docs))
    assert (
        "elasticPolicies: no such field" in found
        and "accessModes" in found
        and "'claimName' is a required property" in found
    )


def _slurm_standins(tmp_path: Path) -> dict[str, str]:
    """PATH with `scontrol` (lists two nodes) and `srun` (records its command line) stand-ins."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a17\\ngpu-a18\\n"\n'
    )
    (bin_dir / "srun").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path}/srun.args\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                SLURM_JOB_NODELIST="gpu-a[17-18]", SLURM_JOB_ID="4242",
                SLURM_JOB_NUM_NODES="2", SLURM_CPUS_PER_TASK="8")  # fmt: skip


def test_slurm_script_port_from_the_job_id_and_an_absolute_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_path = str(REPO / SCRIPT)
    text = export(
        capsys, "slurm", script_path, "--nnodes", "2", "--nproc-per-node", "4", "--", "--lr", "0.1"
    )
    assert re.search(r"^#SBATCH --nodes=2$", text, re.M) and re.search(
        r"^#SBATCH --gpus-per-node=4$", text, re.M
    )
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert (
        subprocess.run(
            ["bash", "-n", str(script)], capture_output=True, text=True, timeout=30
        ).returncode
        == 0
    )
    env = _slurm_standins(tmp_path)
    env.pop("MASTER_PORT", None)
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    args = (tmp_path / "srun.args").read_text().splitlines()
    assert args[:3] == ["--kill-on-bad-exit=1", "distrain", "run"]
    opts = dict(zip(args[3:-3:2], args[4:-3:2], strict=True))
    assert (
        opts["--rdzv-endpoint"] == f"gpu-a17:{15000 + 4242 % 20000}" and opts["--rdzv-id"] == "4242"
    )  # cluster/slurm.py's rule
    assert opts["--nproc-per-node"] == "4" and opts["--run-dir"] == "runs/4242"
    assert args[-3:] == [script_path, "--lr", "0.1"]
    # a fixed --port stays fixed
    assert (
        "MASTER_PORT=${MASTER_PORT:-29600}"
        in export(capsys, "slurm", SCRIPT, "--port", "29600").splitlines()
    )


def test_slurm_requeue_time_warning_elastic(capsys: pytest.CaptureFixture[str]) -> None:
    text = export(capsys, "slurm", SCRIPT, "--nnodes", "1", "--gpus-per-node", "0")
    for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=USR1@120"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^trap .* USR1 TERM$", text, re.M)  # the batch shell waits for the checkpoint
    assert "#SBATCH --signal=USR1@45\n" in export(capsys, "slurm", SCRIPT, "--time-warning", "45")
    text = export(capsys, "slurm", SCRIPT, "--nnodes", "1:4", "--gpus-per-node", "0")
    assert (
        "#SBATCH --nodes=1-4" in text
        and "--gpus-per-node" not in text
        and "--nnodes 1:4" in text
        and "--max-restarts 3" in text
    )


def test_repo_docker_files_are_the_generated_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docker/Dockerfile, .dockerignore, compose.yaml are exactly what `distrain export` writes."""
    (tmp_path / "examples").mkdir()
    (tmp_path / SCRIPT).write_text((REPO / SCRIPT).read_text())
    for argv, files in (
        (["docker", SCRIPT, "--install", ".[examples]", "--image", "distrain:latest", "--out",
          "docker/Dockerfile"],
         ["docker/Dockerfile", "docker/Dockerfile.dockerignore"]),
        (["compose", SCRIPT, "--image", "distrain:latest", "--context", "..", "--dockerfile",
          "docker/Dockerfile", "--gpus-per-node", "1", "--out", "docker/compose.yaml"],
         ["docker/compose.yaml"]),
    ):  # fmt: skip
        assert export(capsys, *argv, cwd=tmp_path) == ""  # went to the files
        for name in files:
            assert (tmp_path / name).read_text() == (REPO / name).read_text(), (
                f"regenerate {name}: distrain export {shlex.join(argv)}"
            )
    assert compose_errors(REPO / "docker/compose.yaml") is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["k8s", "missing.py"], "script not found: missing.py"),
        (["k8s", SCRIPT], "k8s needs --image REGISTRY/NAME:TAG"),
        (["docker", "/abs/train.py"], "relative to the project directory"),
        (["docker", SCRIPT, "--install", "distrain"], "names a package on an index"),
        (["compose", SCRIPT, "--nnodes", "3:1"], "MIN:MAX"),
        (["compose", SCRIPT, "--nnodes", "two"], "N or MIN:MAX"),
        (["helm", SCRIPT], "invalid choice"),
        (["docker", SCRIPT, "--nproc-per-node", "0"], "at least 1"),
        (["slurm", SCRIPT, "--time-warning", "0"], "--time-warning must be 1..65535 seconds"),
    ],
)
def test_bad_input_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
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
    res = run(
        [python(), "-m", "distrain.cli", "export", "slurm", SCRIPT, "--out", str(out)],
        timeout=120,
        cwd=REPO,
        check=True,
    )
    assert res.stdout == "" and f"wrote {out}" in res.stderr
    assert os.access(out, os.X_OK) and out.read_text().startswith("#!/bin/bash")
    assert shlex.split(out.read_text().splitlines()[-1])[0] == "srun"
