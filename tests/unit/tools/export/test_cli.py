"""tools/export/cli.py: option validation into a JobSpec, the dispatch to each renderer."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.tools.export.cli import _parser, build_spec, generate
from distrain.tools.export.spec import JobSpec


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _spec(*argv: str, script_args: list[str] | None = None) -> tuple[argparse.Namespace, JobSpec]:
    args = _parser().parse_args(list(argv))
    return args, build_spec(args, script_args or [])


def test_defaults(project: Path) -> None:
    _, spec = _spec("slurm", "src/train.py", script_args=["--lr", "1"])
    assert (spec.script, spec.script_args, spec.min_nodes, spec.max_nodes) == (
        "src/train.py",
        ["--lr", "1"],
        2,
        2,
    )
    assert (spec.nproc_per_node, spec.gpus_per_node, spec.name, spec.port) == (1, 1, "train", None)
    assert (spec.image, spec.install) == ("distrain-job:latest", "auto")


def test_slurm_port_is_left_to_the_job_id_unless_given(project: Path) -> None:
    assert _spec("slurm", "src/train.py")[1].port is None
    assert _spec("slurm", "src/train.py", "--port", "29600")[1].port == 29600


def test_k8s_needs_a_pushed_image_with_its_registry(project: Path) -> None:
    with pytest.raises(UsageError, match="k8s needs --image REGISTRY/NAME:TAG"):
        _spec("k8s", "src/train.py")
    with pytest.raises(UsageError, match="name the registry"):
        _spec("k8s", "src/train.py", "--image", "train:1")
    assert (
        _spec("k8s", "src/train.py", "--image", "ghcr.io/me/train:1")[1].image
        == "ghcr.io/me/train:1"
    )


def test_gpus_default_to_processes_and_names_are_made_dns_safe(project: Path) -> None:
    _, spec = _spec(
        "slurm", "src/train.py", "--nproc-per-node", "4", "--name", "My Job", "--nnodes", "1:3"
    )
    assert (spec.gpus_per_node, spec.name, spec.elastic) == (4, "my-job", True)
    _, cpu = _spec("compose", "src/train.py", "--gpus-per-node", "0")
    assert cpu.gpus_per_node == 0


def test_compose_reserves_gpus_only_where_the_machine_has_them(project: Path) -> None:
    import torch

    has = torch.cuda.device_count() > 0  # torch's count, not the export's own probe (NVML)
    _, spec = _spec("compose", "src/train.py", "--nproc-per-node", "2")
    assert spec.gpus_per_node == (2 if has else 0)
    text = generate("compose", spec, _parser().parse_args(["compose", "x"])).text
    assert ("deploy" in text) == has
    _, asked = _spec("compose", "src/train.py", "--nproc-per-node", "2", "--gpus-per-node", "2")
    assert asked.gpus_per_node == 2  # asked for: written as asked


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["src/missing.py"], "script not found: src/missing.py"),
     (["src/train.py", "--nproc-per-node", "0"], r"--nproc-per-node must be at least 1 \(got 0\)"),
     (["src/train.py", "--gpus-per-node", "-1"], r"--gpus-per-node must be 0 or more"),
     (["src/train.py", "--port", "0"], r"--port 0 is outside 1..65535"),
     (["src/train.py", "--time-warning", "0"], r"--time-warning must be 1..65535 seconds"),
     (["src/train.py", "--max-restarts", "-1"], "--max-restarts at least 0"),
     (["src/train.py", "--nnodes", "3:1"], "--nnodes expects N or MIN:MAX with 1 <= MIN <= MAX")],
)  # fmt: skip
def test_build_spec_refuses(project: Path, argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _spec("slurm", *argv)


@pytest.mark.parametrize("target", ["docker", "compose", "k8s"])
def test_absolute_script_paths_are_refused_where_an_image_holds_the_script(
    project: Path, target: str
) -> None:
    with pytest.raises(UsageError, match="give the script relative to the project directory"):
        _spec(target, str(project / "src" / "train.py"), "--image", "r/i:1")


def test_slurm_takes_an_absolute_script_path(project: Path) -> None:
    script = str(project / "src" / "train.py")
    assert _spec("slurm", script)[1].script == script


def test_requirements_beside_the_script_or_named(project: Path) -> None:
    args, spec = _spec("docker", "src/train.py")
    assert "requirements" not in generate("docker", spec, args, build=False).text
    (project / "src" / "requirements.txt").write_text("scipy\n")
    assert (
        "COPY src/requirements.txt /tmp/requirements.txt"
        in generate("docker", spec, args, build=False).text
    )
    (project / "reqs.txt").write_text("scipy\n")
    args, spec = _spec("docker", "src/train.py", "--requirements", "reqs.txt")
    assert "COPY reqs.txt /tmp/requirements.txt" in generate("docker", spec, args, build=False).text
    with pytest.raises(UsageError, match="no such file: nope.txt"):
        args, spec = _spec("docker", "src/train.py", "--requirements", "nope.txt")
        generate("docker", spec, args, build=False)


def test_unknown_target_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="invalid choice: 'helm'"):
        _parser().parse_args(["helm", "t.py"])


@pytest.mark.parametrize(
    ("target", "marker"),
    [("docker", "FROM "), ("compose", "services:"), ("slurm", "#SBATCH"), ("k8s", "PyTorchJob")],
)
def test_generate_dispatches_to_the_target(project: Path, target: str, marker: str) -> None:
    args, spec = _spec(target, "src/train.py", "--image", "reg.example/me/train:1")
    assert marker in generate(target, spec, args, build=False).text


def test_script_arguments_follow_the_separator_and_a_stray_word_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from distrain.tools.export.cli import main

    assert main(["slurm", "--nnodes", "2", "src/train.py", "--", "--lr", "1"]) == 0
    assert "src/train.py --lr 1" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["slurm", "src/train.py", "--nnodes", "2", "--lr", "1"])  # no `--`
    assert stop.value.code == 2
    assert "unrecognized arguments: --lr 1" in capsys.readouterr().err
