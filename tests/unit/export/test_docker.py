"""export/docker.py: the Dockerfile text for a JobSpec."""

from __future__ import annotations

import json

from distrain.export import docker
from distrain.export.spec import JobSpec


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_dockerfile_installs_distrain_before_copying_the_project() -> None:
    text = docker.render(JobSpec("examples/train.py", ["--epochs", "3"], base_image="base:1", image="me/job:2"))
    lines = _lines(text)
    assert "FROM base:1" in lines and "WORKDIR /workspace" in lines
    assert lines.index('RUN python -m pip install "distrain"') < lines.index("COPY . /workspace")
    assert 'ENTRYPOINT ["distrain", "run"]' in lines
    cmd = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    assert cmd == ["--nproc", "auto", "--run-dir", "runs/train", "examples/train.py", "--epochs", "3"]
    assert "# Build:  docker build -t me/job:2 ." in lines
    assert text.endswith("\n")


def test_a_local_install_copies_the_context_first() -> None:
    lines = _lines(docker.render(JobSpec("t.py", install=".[examples]")))
    assert lines.index("COPY . /workspace") < lines.index('RUN python -m pip install ".[examples]"')


def test_a_dockerfile_elsewhere_is_named_in_the_build_line() -> None:
    assert "# Build:  docker build -f docker/Dockerfile.train -t distrain-job:latest ." in _lines(
        docker.render(JobSpec("t.py"), path="docker/Dockerfile.train"))  # fmt: skip
