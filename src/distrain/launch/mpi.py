"""`distrain run --launcher mpirun|horovodrun`: the same script through MPI or Horovod's launcher.

distrain does not re-implement either launcher; it builds their command line:

- Open MPI ``mpirun``: ``--bind-to none`` (its default core binding for ≤ 2 ranks pins each
  rank to one core, whatever OMP_NUM_THREADS says), ``--allow-run-as-root`` when root (containers),
  ``--oversubscribe`` when there are more ranks than cores, and ``-x`` for the variables the
  workers need.  MPICH's hydra ``mpirun`` gets ``-n`` and ``-genv``.
- ``horovodrun -np N -H localhost:N``; gloo mode unless Horovod was built with MPI.

The workers find their rank from the launcher's own variables (see :mod:`distrain.cluster`).
These launchers start every node themselves, so distrain drives them on one node only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping

from distrain.errors import UsageError
from distrain.process.cores import usable_cores

LAUNCHERS = ("torchrun", "mpirun", "horovodrun")

#: variables passed on to MPI ranks explicitly (Open MPI forwards only what -x names to remote
#: hosts)
_FORWARD_PREFIXES = (
    "DISTRAIN_",
    "OMP_NUM_THREADS",
    "PYTHONPATH",
    "GLOO_",
    "NCCL_",
    "TORCH_",
    "CUDA_VISIBLE_DEVICES",
)


def _program(args: argparse.Namespace) -> list[str]:
    if args.no_python:
        head = [args.training_script]
    elif args.module:
        head = [sys.executable, "-m", args.training_script]
    else:
        head = [sys.executable, "-u", args.training_script]
    return head + list(args.training_script_args)


def _forwarded(env: Mapping[str, str]) -> list[str]:
    names = {k for k in {**os.environ, **env} if k.startswith(_FORWARD_PREFIXES)}
    return sorted(names)


def is_open_mpi(mpirun: str) -> bool:
    """True when `mpirun` is Open MPI's (its flags differ from MPICH/Intel MPI hydra)."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out.stdout + out.stderr


def mpirun_command(args: argparse.Namespace, env: Mapping[str, str]) -> list[str]:
    """The mpirun command line that starts `args.nproc_per_node` ranks of the script on this node"""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise UsageError("--launcher mpirun: mpirun not found (apt-get install openmpi-bin)")
    n = int(args.nproc_per_node)
    if is_open_mpi(mpirun):
        cmd = [mpirun, "-np", str(n), "--bind-to", "none"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if n > usable_cores():
            cmd.append("--oversubscribe")
        for name in _forwarded(env):
            cmd += ["-x", name]
    else:
        cmd = [mpirun, "-n", str(n)]
        for name in _forwarded(env):
            cmd += ["-genv", name, {**os.environ, **env}[name]]
    return cmd + _program(args)


def horovodrun_command(args: argparse.Namespace) -> list[str]:
    """The horovodrun command line for `args.nproc_per_node` ranks on this node."""
    horovodrun = shutil.which("horovodrun")
    if horovodrun is None:
        raise UsageError(
            "--launcher horovodrun: horovodrun not found (Horovod is optional: "
            "scripts/install-horovod.sh)"
        )
    n = int(args.nproc_per_node)
    return [horovodrun, "--gloo", "-np", str(n), "-H", f"localhost:{n}"] + _program(args)


def command_for(args: argparse.Namespace, env: Mapping[str, str]) -> list[str]:
    """The launcher command line for `args.launcher` (one node: the plan refused more,
    launch/options/validate.py); UsageError when it cannot be used."""
    if args.launcher == "mpirun":
        return mpirun_command(args, env)
    if args.launcher == "horovodrun":
        return horovodrun_command(args)
    raise UsageError(f"unknown launcher {args.launcher!r} (choose from {', '.join(LAUNCHERS)})")


def run_with_launcher(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Run the job under mpirun/horovodrun; return its exit code (128+N for a signal)."""
    cmd = command_for(args, env)
    print(f"distrain run: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env={**os.environ, **env})
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        code = proc.wait()
    return 128 - code if code < 0 else code
