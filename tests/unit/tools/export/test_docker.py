"""tools/export/docker.py: the Dockerfile text for a JobSpec and how it installs distrain."""

from __future__ import annotations

import json

from distrain.tools.export import docker
from distrain.tools.export.install import Install
from distrain.tools.export.spec import JobSpec

WHEEL = Install("wheel", "wheels/distrain-0.1.0-py3-none-any.whl", "/src")


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_dockerfile_installs_the_wheel_before_copying_the_project() -> None:
    text = docker.render(
        JobSpec("examples/train.py", ["--epochs", "3"], base_image="base:1", image="me/job:2"),
        WHEEL,
    )
    lines = _lines(text)
    assert "FROM base:1" in lines and "WORKDIR /workspace" in lines
    copy = "COPY wheels/distrain-0.1.0-py3-none-any.whl /tmp/wheels/distrain-0.1.0-py3-none-any.whl"
    install = 'RUN python -m pip install "/tmp/wheels/distrain-0.1.0-py3-none-any.whl"'
    assert lines.index(copy) < lines.index(install) < lines.index("COPY . /workspace")
    assert not any(
        "pip install" in line and 'distrain"' in line for line in lines
    )  # never the index name
    assert 'ENTRYPOINT ["distrain", "run"]' in lines
    cmd = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    assert cmd == [
        "--nproc",
        "auto",
        "--run-dir",
        "runs/train",
        "examples/train.py",
        "--epochs",
        "3",
    ]
    assert "# Build:  docker build -t me/job:2 ." in lines
    assert (
        '# Run:    docker run --gpus all --ipc=host --rm -v "$PWD/runs:/workspace/runs" me/job:2'
        in lines
    )
    assert text.endswith("\n")


def test_requirements_are_installed_before_the_project_is_copied() -> None:
    lines = _lines(docker.render(JobSpec("t.py"), WHEEL, requirements="requirements.txt"))
    reqs = lines.index("RUN python -m pip install -r /tmp/requirements.txt")
    assert (
        lines.index("COPY requirements.txt /tmp/requirements.txt")
        < reqs
        < lines.index("COPY . /workspace")
    )


def test_a_context_install_copies_the_context_first() -> None:
    lines = _lines(docker.render(JobSpec("t.py"), Install("context", ".[examples]")))
    assert lines.index("COPY . /workspace") < lines.index('RUN python -m pip install ".[examples]"')


def test_a_cpu_job_runs_without_gpus_and_a_dockerfile_elsewhere_is_named() -> None:
    text = docker.render(
        JobSpec("t.py", gpus_per_node=0),
        Install("url", "git+https://example.org/distrain"),
        path="docker/Dockerfile.train",
    )
    assert "# Build:  docker build -f docker/Dockerfile.train -t distrain-job:latest ." in _lines(
        text
    )
    assert "--gpus" not in text and "docker run --ipc=host" in text
    assert (
        docker.dockerignore_path("docker/Dockerfile.train")
        == "docker/Dockerfile.train.dockerignore"
    )
    assert docker.dockerignore_path("Dockerfile") == ".dockerignore"
