"""`distrain export {docker,compose,slurm,k8s} script.py [options] [-- script args]`."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from distrain.errors import UsageError, fail, raise_usage_errors
from distrain.launch.command_line import split
from distrain.tools.export import base_image, compose, docker, k8s, requirements, slurm
from distrain.tools.export.install import resolve
from distrain.tools.export.spec import (
    DEFAULT_PORT,
    JobSpec,
    dns_name,
    parse_nnodes,
)

PROG = "distrain export"
TARGETS = ("docker", "compose", "slurm", "k8s")
LOCAL_IMAGE = "distrain-job:latest"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Generate a Dockerfile, a compose file, a SLURM batch script or a Kubeflow "
        "PyTorchJob for a training script. Script arguments go after --.",
        allow_abbrev=False,
    )
    parser.add_argument("target", choices=TARGETS, help="what to generate")
    parser.add_argument(
        "script",
        help="the training script, relative to the project directory (the image's build context); "
        "SLURM takes an absolute path too",
    )
    _shape_options(parser)
    _image_options(parser)
    _job_options(parser)
    _target_options(parser)
    parser.add_argument(
        "--out",
        default=None,
        help="write to FILE (docker: or into DIR, as DIR/Dockerfile) instead of stdout; docker "
        "writes its .dockerignore (and a requirements.txt) only then",
    )

    raise_usage_errors(parser)
    return parser


def _shape_options(parser: argparse.ArgumentParser) -> None:
    """The nodes and processes of the job."""
    parser.add_argument(
        "--nnodes", default="2", help="nodes: N, or MIN:MAX for an elastic job (default 2)"
    )
    parser.add_argument(
        "--nproc-per-node", type=int, default=1, help="processes per node (default 1)"
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs per node (default: --nproc-per-node; compose: 0 when this machine has no "
        "GPU; 0 for CPU-only)",
    )


def _image_options(parser: argparse.ArgumentParser) -> None:
    """The image the job runs in and how distrain and the script's requirements get in."""
    parser.add_argument(
        "--image",
        default=None,
        help="the job's image; k8s: required, REGISTRY/NAME:TAG as pushed (docker/compose "
        f"default {LOCAL_IMAGE})",
    )
    parser.add_argument(
        "--base-image",
        default=None,
        help="Dockerfile base image (default: the official PyTorch image of the torch installed "
        "here; a pytorch/pytorch image of another torch is refused)",
    )
    parser.add_argument(
        "--install",
        default="auto",
        help="how the image gets distrain: auto (a wheel built from this distrain, or '.' in "
        "distrain's own tree), a .whl file in the project, '.[extras]', or a git+https:// URL; "
        "never an index name (default auto)",
    )
    parser.add_argument(
        "--requirements",
        default=None,
        help="docker: the script's pip requirements file (default: requirements.txt beside "
        "the script, if any)",
    )


def _job_options(parser: argparse.ArgumentParser) -> None:
    """The name, rendezvous port and restarts of the job."""
    parser.add_argument("--name", default="", help="job name (default: from the script's name)")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"rendezvous / master port (default {DEFAULT_PORT}; SLURM: 15000 + job id %% "
        "20000, one per job)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=3,
        help="restarts of an elastic job; k8s: also the pod backoff limit (default 3)",
    )


def _target_options(parser: argparse.ArgumentParser) -> None:
    """Options that only one target reads (SLURM, compose, k8s)."""
    parser.add_argument(
        "--cpus-per-node",
        type=int,
        default=8,
        help="SLURM: CPUs given to each node's distrain run (default 8)",
    )
    parser.add_argument(
        "--time-warning",
        type=int,
        default=120,
        help="SLURM: seconds before the time limit at which SIGUSR1 asks the job to checkpoint and "
        "requeue (default 120)",
    )
    parser.add_argument(
        "--context",
        default=".",
        help="compose: build context, relative to the compose file (default .)",
    )
    parser.add_argument(
        "--dockerfile",
        default="Dockerfile",
        help="compose: Dockerfile, relative to the context (default Dockerfile)",
    )
    parser.add_argument(
        "--network",
        choices=compose.NETWORKS,
        default="host",
        help="compose: host (one node per machine, MASTER_ADDR given at `up`) or bridge (all nodes "
        "on one machine) (default host)",
    )
    parser.add_argument(
        "--pvc",
        default=None,
        help="k8s: an existing ReadWriteMany PersistentVolumeClaim for runs/ and checkpoints "
        "(default: one is written)",
    )
    parser.add_argument(
        "--pvc-size",
        default=k8s.DEFAULT_PVC_SIZE,
        help=f"k8s: size of the written claim (default {k8s.DEFAULT_PVC_SIZE})",
    )


def _check_image(target: str, image: str | None) -> str:
    if target != "k8s":
        return image or LOCAL_IMAGE
    if not image:
        raise UsageError(
            "k8s needs --image REGISTRY/NAME:TAG: the image pushed where the cluster pulls from "
            "(build it from `distrain export docker`, then docker push)"
        )
    if "/" not in image:
        raise UsageError(
            f"--image {image}: name the registry (REGISTRY/NAME:TAG); a bare name means "
            f"docker.io/library/{image}, the official images"
        )
    return image


def build_spec(args: argparse.Namespace, script_args: list[str]) -> JobSpec:
    """Validate the parsed options into a JobSpec (UsageError on bad input)."""
    if os.path.isabs(args.script) and args.target != "slurm":
        raise UsageError(
            f"give the script relative to the project directory, not {args.script} (it is "
            "copied into the image)"
        )
    if not os.path.isfile(args.script):
        raise UsageError(f"script not found: {args.script}")
    min_nodes, max_nodes = parse_nnodes(args.nnodes)
    if args.nproc_per_node < 1:
        raise UsageError(f"--nproc-per-node must be at least 1 (got {args.nproc_per_node})")
    gpus = args.nproc_per_node if args.gpus_per_node is None else args.gpus_per_node
    if args.gpus_per_node is None and args.target in LOCAL_TARGETS and machine_gpus() == 0:
        gpus = 0  # a reservation of GPUs this machine lacks stops `docker compose up`
    if gpus < 0:
        raise UsageError(f"--gpus-per-node must be 0 or more (got {gpus})")
    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port} is outside 1..65535")
    if not 0 < args.time_warning <= 65535:
        raise UsageError(f"--time-warning must be 1..65535 seconds (got {args.time_warning})")
    if args.cpus_per_node < 1 or args.max_restarts < 0:
        raise UsageError("--cpus-per-node must be at least 1 and --max-restarts at least 0")
    port = args.port if args.port is not None or args.target == "slurm" else DEFAULT_PORT
    return JobSpec(
        script=Path(args.script).as_posix(),
        script_args=script_args,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=args.nproc_per_node,
        gpus_per_node=gpus,
        image=_check_image(args.target, args.image),
        base_image=_base_image(args),
        install=args.install,
        name=dns_name(args.name) if args.name else "",
        port=port,
        max_restarts=args.max_restarts,
    )


@dataclass
class Output:
    """The main text, files written beside it (path → what), and what to tell the user next."""

    text: str
    extra: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: where the main text goes with --out (None: --out as given)
    path: str | None = None


#: the target whose GPU reservation stops `up` on a machine without GPUs: its default follows
#: this machine's (a SLURM or Kubernetes job is exported from a login machine for others)
LOCAL_TARGETS = ("compose",)


def machine_gpus() -> int:
    """The GPUs of this machine, as its NVIDIA driver counts them (0 without one)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: no GPU to reserve
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def dockerfile_path(out: str | None) -> str:
    """The Dockerfile's path for `--out` (a file, or a directory: DIR/Dockerfile)."""
    if out is None:
        return "Dockerfile"
    if out.endswith("/") or Path(out).is_dir():
        return (Path(out) / "Dockerfile").as_posix()
    return Path(out).as_posix()


def _base_image(args: argparse.Namespace) -> str:
    if args.base_image is None:
        return base_image.for_installed_torch() if args.target == "docker" else ""
    base_image.check(args.base_image)
    return str(args.base_image)


def _docker(spec: JobSpec, args: argparse.Namespace, build: bool) -> Output:
    path = dockerfile_path(args.out)
    resolve(spec.install, Path.cwd(), build=False)  # its refusal first, as before
    # before the wheel is built: a refusal leaves nothing behind
    needs = requirements.for_image(spec.script, args.requirements, spec.install, bool(args.out))
    install = resolve(spec.install, Path.cwd(), build=build)
    out = Output(docker.render(spec, install, needs.path, path=path), path=path)
    out.extra.update(needs.write)
    out.notes += needs.notes
    ignore = docker.dockerignore_path(path)
    if args.out is None:  # nothing written unasked: say where it would go
        out.notes.append(
            f"no {ignore} written (the Dockerfile went to stdout): with --out {path} it is "
            "written beside it, keeping .git, runs/ and caches out of the build context"
        )
    elif not Path(ignore).exists():
        out.extra[ignore] = "\n".join(docker.DOCKERIGNORE) + "\n"
    else:
        out.notes.append(f"kept the existing {ignore}")
    if install.built_from:
        out.notes.append(f"built {install.spec} from {install.built_from}")
    out.notes += [
        f"build: docker build {'' if path == 'Dockerfile' else f'-f {path} '}-t {spec.image} .",
        f"run:   {docker.run_command(spec)}",
    ]
    return out


def generate(target: str, spec: JobSpec, args: argparse.Namespace, build: bool = True) -> Output:
    """The text of `target` for `spec` (`build`: build the wheel `--install auto` names)."""
    if target == "docker":
        return _docker(spec, args, build)
    if target == "compose":
        notes = (
            [
                "start: MASTER_ADDR=<node0's machine address> docker compose up --build "
                "node<i>, on each machine"
            ]
            if args.network == "host"
            else []
        )
        return Output(
            compose.render(
                spec, context=args.context, dockerfile=args.dockerfile, network=args.network
            ),
            notes=notes,
        )
    if target == "slurm":
        return Output(
            slurm.render(spec, cpus_per_node=args.cpus_per_node, time_warning=args.time_warning)
        )
    claim = k8s.claim_name(spec, args.pvc)
    notes = [
        f"image {spec.image}: push it first (docker push {spec.image})",
        f"checkpoints: every pod mounts claim {claim} on {k8s.SHARED_MOUNT}; give the script "
        "a directory there (-- --checkpoint-dir runs/ckpt)",
    ]
    if k8s.pull_policy(spec.image) == "Always":
        notes.append(
            f"{spec.image} has a mutable tag: pods started later may run a newer build; "
            "prefer a version tag"
        )
    return Output(k8s.render(spec, pvc=args.pvc, pvc_size=args.pvc_size), notes=notes)


def _write(path: Path, text: str, executable: bool = False) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if executable:
            path.chmod(0o755)
    except OSError as err:
        fail(PROG, f"cannot write {path}: {err.strerror}", 1)


def main(argv: list[str]) -> int:
    """Entry point of `distrain export`."""
    command = split(argv, _parser(), leading=2)  # target and script; its arguments after ``--``
    # without ``--`` a further word is argparse's to refuse (script arguments follow ``--``)
    own = command.launcher_argv if command.separated else argv
    script_args = list(command.script_argv) if command.separated else []
    try:
        args = _parser().parse_args(own)
        spec = build_spec(args, script_args)
        result = generate(args.target, spec, args)
        if args.target in LOCAL_TARGETS and args.gpus_per_node is None and not spec.gpus_per_node:
            result.notes.append(
                "this machine has no GPU: none reserved (--gpus-per-node N reserves N per node)"
            )
    except UsageError as err:
        fail(PROG, str(err), err.exit_code)
    written = []
    for name, text in result.extra.items():
        _write(Path(name), text)
        written.append(name)
    if args.out is None:
        sys.stdout.write(result.text)
    else:
        where = result.path or args.out
        _write(Path(where), result.text, executable=args.target == "slurm")
        written.insert(0, where)
    if written:
        print(f"{PROG}: wrote {', '.join(written)}", file=sys.stderr)
    for note in result.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    return 0
