"""What every export target needs to know about the job."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from distrain.errors import UsageError
from distrain.launch.command_line import option_values

#: an official PyTorch runtime image (CUDA + cuDNN, Python and torch in /opt/conda)
DEFAULT_BASE_IMAGE = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
#: where the project is copied inside the image
WORKDIR = "/workspace"
DEFAULT_PORT = 29500
#: a script option that names a directory it writes (checkpoints, outputs): ``--checkpoint-dir``,
#: ``--ckpt``, ``--save-dir``, ``--output-dir``, ``--out`` (not ``--checkpoint-every``)
_DIR_OPTION = re.compile(
    r"^--?(?:[a-z0-9]+[-_])*(?:checkpoints?|ckpts?|save|output|out)"
    r"(?:[-_](?:dir|directory|path|root|folder))?$",
    re.IGNORECASE,
)


@dataclass
class JobSpec:
    """A training job: the script, its size, and the image it runs in."""

    script: str
    script_args: list[str] = field(default_factory=list)
    min_nodes: int = 2
    max_nodes: int = 2
    nproc_per_node: int = 1
    gpus_per_node: int = 1
    image: str = "distrain-job:latest"
    base_image: str = DEFAULT_BASE_IMAGE
    install: str = "auto"
    name: str = ""
    port: int | None = DEFAULT_PORT  # None: the target picks (SLURM: from the job id)
    max_restarts: int = 3

    def __post_init__(self) -> None:
        if not self.name:
            self.name = dns_name(PurePosixPath(self.script).stem)

    @property
    def elastic(self) -> bool:
        """True when the number of nodes is a range (c10d rendezvous, elastic policy)."""
        return self.min_nodes != self.max_nodes

    @property
    def nnodes(self) -> str:
        """The ``--nnodes`` value: ``N`` or ``MIN:MAX``."""
        return str(self.min_nodes) if not self.elastic else f"{self.min_nodes}:{self.max_nodes}"

    @property
    def run_dir(self) -> str:
        """Where the job's metrics go (relative to the working directory), for `distrain top`."""
        return f"runs/{self.name}"

    def written_dirs(self) -> list[str]:
        """The directories the script is told to write to (``--checkpoint-dir D``, ``--out=D``):
        a container loses them unless they are mounted from the host."""
        return option_values(self.script_args, lambda name: bool(_DIR_OPTION.match(name)))

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, container path) for runs/ and every directory the script writes outside
        it; a relative host path is relative to where the job is started."""
        out = [("runs", f"{WORKDIR}/runs")]
        for directory in self.written_dirs():
            path = PurePosixPath(directory)
            if path.is_absolute():
                out.append((str(path), str(path)))
            elif path.parts and path.parts[0] not in ("runs", ".."):  # runs/: mounted already
                out.append((str(path), f"{WORKDIR}/{path}"))
        return out

    def script_command(self) -> list[str]:
        """The script and its arguments (distrain run passes everything after the script on)."""
        return [self.script, *self.script_args]

    def run_command(self, *launcher_args: str) -> list[str]:
        """``distrain run`` with `launcher_args`, this job's processes, run directory and script."""
        return [
            "distrain",
            "run",
            *launcher_args,
            "--nproc-per-node",
            str(self.nproc_per_node),
            "--run-dir",
            self.run_dir,
            *self.script_command(),
        ]


def parse_nnodes(value: str) -> tuple[int, int]:
    """``"2"`` → (2, 2); ``"1:4"`` → (1, 4); UsageError otherwise."""
    parts = value.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--nnodes expects N or MIN:MAX (got {value!r})") from None
    if len(numbers) == 1:
        numbers *= 2
    if len(numbers) != 2 or numbers[0] < 1 or numbers[1] < numbers[0]:
        raise UsageError(f"--nnodes expects N or MIN:MAX with 1 <= MIN <= MAX (got {value!r})")
    return numbers[0], numbers[1]


def dns_name(text: str) -> str:
    """A Kubernetes/compose-safe name: lowercase letters, digits and dashes."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower())[:50].strip(
        "-"
    )  # cut first: no dash left at either end
    return name or "train"
