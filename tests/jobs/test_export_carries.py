"""`distrain export` carries what the script needs: its imports the image lacks, the torch of this
machine, its checkpoint directory, and no file written unasked (issue 45).

`distrain export` runs as the user runs it (`python -m distrain.cli export …`, in a project
folder); the Dockerfile is read by BuildKit's parser and the compose file by the Compose
Specification's schema (tests/helpers/manifests.py).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import yaml
from helpers import python, run
from helpers.manifests import compose_errors, need

TRAIN = """import os
import numpy
import torch
from sklearn.datasets import load_digits
import distrain
import helper  # the project's own
try:
    import apex_not_here  # optional: the script copes
except ImportError:
    apex_not_here = None
"""


def export(project: Path, *argv: str) -> tuple[int, str, str]:
    """`distrain export ARGV` run in `project`: (exit code, stdout, stderr)."""
    res = run([python(), "-m", "distrain.cli", "export", *argv], timeout=180, cwd=project)
    return res.returncode, res.stdout, res.stderr


def one_error(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("distrain export: error:"), err
    return lines[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    (tmp_path / "src" / "helper.py").write_text("")
    return tmp_path


def test_the_imports_the_image_lacks_get_a_requirements_file(project: Path) -> None:
    need("dockerfile", "dockerfile")
    import dockerfile

    sklearn = importlib.metadata.version("scikit-learn")
    # on stdout nothing can be written: refused, naming the module and its package
    line = one_error(*export(project, "docker", "src/train.py", "--install", ".")[::2])
    assert f"src/train.py imports sklearn (scikit-learn {sklearn}), which the base image" in line
    assert sorted(p.name for p in project.iterdir()) == ["src"]  # nothing written
    code, out, err = export(project, "docker", "src/train.py", "--install", ".", "--out", ".")
    assert code == 0 and out == "", err
    assert "wrote Dockerfile, src/requirements.txt, .dockerignore" in err
    written = (project / "src" / "requirements.txt").read_text().splitlines()
    assert [ln for ln in written if not ln.startswith("#")] == [f"scikit-learn=={sklearn}"]
    parsed = dockerfile.parse_string((project / "Dockerfile").read_text())  # BuildKit's parser
    by_cmd = [(c.cmd, c.value) for c in parsed]
    assert ("COPY", ("src/requirements.txt", "/tmp/requirements.txt")) in by_cmd
    assert ("RUN", ("python -m pip install -r /tmp/requirements.txt",)) in by_cmd
    # a requirements file that leaves it out is refused; one that names it is taken
    (project / "src" / "requirements.txt").write_text("pandas>=2\n")
    line = one_error(*export(project, "docker", "src/train.py", "--install", ".")[::2])
    assert "neither the base image nor src/requirements.txt installs: add it" in line
    (project / "src" / "requirements.txt").write_text("Scikit_Learn>=1.3  # pip's spelling\n")
    assert export(project, "docker", "src/train.py", "--install", ".")[0] == 0


def test_a_module_no_package_here_provides_is_refused(project: Path) -> None:
    (project / "src" / "train.py").write_text(TRAIN + "import nowhere_to_be_found\n")
    (project / "src" / "requirements.txt").write_text("scikit-learn\n")
    line = one_error(*export(project, "docker", "src/train.py", "--install", ".")[::2])
    assert "imports nowhere_to_be_found, which neither the base image" in line
    (project / "src" / "requirements.txt").unlink()
    line = one_error(*export(project, "docker", "src/train.py", "--install", ".")[::2])
    assert "nowhere_to_be_found" in line and "no package installed here provides" in line


def test_the_base_image_is_this_machines_torch(project: Path) -> None:
    import torch

    (project / "src" / "requirements.txt").write_text("scikit-learn\n")
    code, out, err = export(project, "docker", "src/train.py", "--install", ".")
    release = torch.__version__.split("+")[0]
    if torch.version.cuda is None:  # a CPU build: pytorch/pytorch has no image of it
        assert "is a CPU build" in one_error(code, err)
        return
    cudnn = torch.backends.cudnn.version() // 10000  # 92400 → 9: torch's own reading
    tag = f"pytorch/pytorch:{release}-cuda{torch.version.cuda}-cudnn{cudnn}-runtime"
    assert code == 0 and f"FROM {tag}\n" in out, err
    other = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
    line = one_error(*export(project, "docker", "src/train.py", "--base-image", other)[::2])
    assert f"holds torch 2.8.0 but this machine runs {release}" in line
    own = export(project, "docker", "src/train.py", "--install", ".", "--base-image", "me/t:1")
    assert own[0] == 0 and "FROM me/t:1\n" in own[1]  # another image: taken as given


def test_printing_writes_no_dockerignore_and_says_where(project: Path) -> None:
    (project / "src" / "requirements.txt").write_text("scikit-learn\n")
    code, out, err = export(project, "docker", "src/train.py", "--install", ".")
    assert code == 0 and out.startswith("# Generated by `distrain export docker")
    assert not (project / ".dockerignore").exists()
    assert "no .dockerignore written (the Dockerfile went to stdout): with --out Dockerfile" in err
    (project / "deploy").mkdir()
    code, _, err = export(project, "docker", "src/train.py", "--install", ".", "--out", "deploy")
    assert code == 0 and "wrote deploy/Dockerfile, deploy/Dockerfile.dockerignore" in err, err


def test_compose_mounts_the_checkpoint_directory(project: Path) -> None:
    import torch

    script_args = ["--checkpoint-dir", "/data/ckpt", "--save-dir=ckpt", "--checkpoint-every", "9"]
    code, out, err = export(project, "compose", "src/train.py", "--", *script_args)
    assert code == 0, err
    (project / "compose.yaml").write_text(out)
    assert compose_errors(project / "compose.yaml") is None
    for service in yaml.safe_load(out)["services"].values():
        assert service["volumes"] == [
            "./runs:/workspace/runs",
            "/data/ckpt:/data/ckpt",
            "./ckpt:/workspace/ckpt",
        ]
        # GPUs reserved only where this machine has them (torch's count, not the export's NVML)
        assert ("deploy" in service) == (torch.cuda.device_count() > 0)
    if not torch.cuda.device_count():
        assert "this machine has no GPU: none reserved" in err
