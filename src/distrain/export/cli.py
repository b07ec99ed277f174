"""`distrain export {docker,compose,slurm,k8s} script.py [options] [-- script args]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import UsageError, fail, raise_usage_errors
from . import compose, docker, k8s, slurm
from .spec import DEFAULT_BASE_IMAGE, DEFAULT_PORT, JobSpec, dns_name, parse_nnodes

PROG = "distrain export"
TARGETS = ("docker", "compose", "slurm", "k8s")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Generate a Dockerfile, a compose file, a SLURM batch script or a Kubeflow PyTorchJob for a training script. Script arguments go after --.",
        allow_abbrev=False,
    )
    parser.add_argument("target", choices=TARGETS, help="what to generate")
    parser.add_argument("script", help="the training script, relative to the project directory (the image's build context)")
    parser.add_argument("--nnodes", default="2", help="nodes: N, or MIN:MAX for an elastic job (default 2)")
    parser.add_argument("--nproc-per-node", type=int, default=1, help="processes per node (default 1)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (default: --nproc-per-node; 0 for CPU-only)")
    parser.add_argument("--image", default="distrain-job:latest", help="the job's image name (default distrain-job:latest)")
    parser.add_argument("--base-image", default=DEFAULT_BASE_IMAGE, help=f"Dockerfile base image (default {DEFAULT_BASE_IMAGE})")
    parser.add_argument("--install", default="distrain", help="pip requirement that installs distrain in the image; '.[examples]' installs the build context (default distrain)")
    parser.add_argument("--name", default="", help="job name (default: from the script's name)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"rendezvous / master port (default {DEFAULT_PORT})")
    parser.add_argument("--max-restarts", type=int, default=3, help="restarts of an elastic job (default 3)")
    parser.add_argument("--cpus-per-node", type=int, default=8, help="SLURM: CPUs given to each node's distrain run (default 8)")
    parser.add_argument("--time-warning", type=int, default=120,
                        help="SLURM: seconds before the time limit at which SIGUSR1 asks the job to checkpoint and requeue (default 120)")
    parser.add_argument("--context", default=".", help="compose: build context, relative to the compose file (default .)")
    parser.add_argument("--dockerfile", default="Dockerfile", help="compose: Dockerfile, relative to the context (default Dockerfile)")
    parser.add_argument("--out", default=None, help="write to FILE instead of stdout")

    raise_usage_errors(parser)
    return parser


def build_spec(args: argparse.Namespace, script_args: list[str]) -> JobSpec:
    """Validate the parsed options into a JobSpec (UsageError on bad input)."""
    if os.path.isabs(args.script):
        raise UsageError(f"give the script relative to the project directory, not {args.script} (it is copied into the image)")
    if not os.path.isfile(args.script):
        raise UsageError(f"script not found: {args.script}")
    min_nodes, max_nodes = parse_nnodes(args.nnodes)
    if args.nproc_per_node < 1:
        raise UsageError(f"--nproc-per-node must be at least 1 (got {args.nproc_per_node})")
    gpus = args.nproc_per_node if args.gpus_per_node is None else args.gpus_per_node
    if gpus < 0:
        raise UsageError(f"--gpus-per-node must be 0 or more (got {gpus})")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port} is outside 1..65535")
    if not 0 < args.time_warning <= 65535:
        raise UsageError(f"--time-warning must be 1..65535 seconds (got {args.time_warning})")
    if args.cpus_per_node < 1 or args.max_restarts < 0:
        raise UsageError("--cpus-per-node must be at least 1 and --max-restarts at least 0")
    return JobSpec(
        script=Path(args.script).as_posix(),
        script_args=script_args,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        nproc_per_node=args.nproc_per_node,
        gpus_per_node=gpus,
        image=args.image,
        base_image=args.base_image,
        install=args.install,
        name=dns_name(args.name) if args.name else "",
        port=args.port,
        max_restarts=args.max_restarts,
    )


def generate(target: str, spec: JobSpec, args: argparse.Namespace) -> str:
    """The text of `target` for `spec`."""
    if target == "docker":
        return docker.render(spec, path=Path(args.out).as_posix() if args.out else "Dockerfile")
    if target == "compose":
        return compose.render(spec, context=args.context, dockerfile=args.dockerfile)
    if target == "slurm":
        return slurm.render(spec, cpus_per_node=args.cpus_per_node, time_warning=args.time_warning)
    return k8s.render(spec)


def main(argv: list[str]) -> int:
    """Entry point of `distrain export`."""
    own, script_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    try:
        args = _parser().parse_args(own)
        spec = build_spec(args, script_args)
        text = generate(args.target, spec, args)
    except UsageError as err:
        fail(PROG, str(err), err.exit_code)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        if args.target == "slurm":
            out.chmod(0o755)
    except OSError as err:
        fail(PROG, f"cannot write {out}: {err.strerror}", 1)
    print(f"{PROG}: wrote {out}", file=sys.stderr)
    return 0
