"""`distrain run`'s own options, beside torchrun's: processes, devices, rehearsal, replicas.

launch/command_line.py builds the one parser of `distrain run` from torchrun's and registers
these on it: distrain's own, the fan-out's hidden ones (their dests: HOST_DESTS) and the start
methods (the fast one the default).
"""

from __future__ import annotations

import argparse

from distrain.launch.mpi import LAUNCHERS

#: the options that make `distrain run` a launcher of many machines (launch/hosts/run.py)
HOST_LIST = ("hosts", "hostfile")

#: `distrain run --help`'s last words: the fan-out's options are left out of the one-node help
EPILOG = (
    "Many machines from this one: --hosts h1:N,h2:N or --hostfile FILE (see "
    "distrain run --hosts h --help)."
)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Register distrain's own options of `distrain run` on torchrun's `parser`."""
    add = parser.add_argument
    add(
        "-n",
        "--nproc",
        default=None,
        help="processes per node: an integer or 'auto' (GPUs, else CPU cores)",
    )
    add(
        "--gpus",
        default=None,
        help="GPU indices to use, e.g. 0,3 (sets CUDA_VISIBLE_DEVICES and nproc)",
    )
    add(
        "--legacy-local-rank",
        "--legacy_local_rank",
        action="store_true",
        help="pass --local_rank=N to the script, for old scripts",
    )
    add(
        "--dry-run",
        "--dry_run",
        action="store_true",
        help="print the equivalent torchrun command; run nothing",
    )
    add(
        "--run-dir",
        "--run_dir",
        default=None,
        help="per-rank metrics and TensorBoard go here (for distrain top); default: --log-dir",
    )
    add(
        "--iface",
        default=None,
        help="network interface to the other nodes (default: the one routing to the master)",
    )
    add(
        "--launcher",
        default="torchrun",
        choices=LAUNCHERS,
        help="process launcher (mpirun/horovodrun: one node)",
    )
    add(
        "--watchdog",
        default=None,
        metavar="SECONDS",
        help="abort with every rank's stack when no rank makes progress this long",
    )
    add(
        "--cpu",
        action="store_true",
        help="rehearse a CUDA/NCCL script on N CPU processes: cuda → cpu, nccl → gloo, unmodified",
    )
    add(
        "--self-starting",
        dest="self_starting",
        action="store_const",
        const=True,
        default=None,
        help="the script starts its own workers (mp.spawn, Process): run it once (default: read "
        "from the script)",
    )
    add(
        "--no-self-starting",
        dest="self_starting",
        action="store_const",
        const=False,
        help="run N copies as torchrun would, even if the script seems to start its own workers",
    )
    add(
        "--replicas",
        default=None,
        metavar="R",
        help="R fault-tolerant replica groups of -n processes each (TorchFT; pip "
        "install 'distrain[ft]')",
    )
    _add_host_options(parser)
    _fast_start_default(parser)


#: how workers start (launch/fast_start/forkserver.py): distrain's fast start, then torch's three
START_METHODS = ("fast", "spawn", "fork", "forkserver")


def _fast_start_default(parser: argparse.ArgumentParser) -> None:
    """Give torchrun's ``--start-method`` distrain's choices and the fast default."""
    for action in parser._actions:
        if action.dest == "start_method":
            action.choices = START_METHODS
            action.default = "fast"
            action.help = (
                "how workers start: fast (fork from a preloaded server, fresh "
                "interpreter as fallback; "
                "default), spawn (fresh interpreters, like torchrun), forkserver, fork"
            )


#: the fan-out's own options (launch/hosts/options.py; its help is host_options.HELP)
HOST_DESTS = (
    "hosts",
    "hostfile",
    "include",
    "exclude",
    "ssh_opts",
    "forward",
    "quiet_hosts",
    "container",
)


def _add_host_options(parser: argparse.ArgumentParser) -> None:
    hidden = argparse.SUPPRESS
    add = parser.add_argument
    add("--hosts", "-H", default=None, help=hidden)
    add("--hostfile", default=None, help=hidden)
    add("--include", default=None, help=hidden)
    add("--exclude", default=None, help=hidden)
    add("--ssh-opts", default=None, help=hidden)
    add("-x", dest="forward", action="append", default=None, help=hidden)
    add("--quiet-hosts", action="store_true", help=hidden)
    add("--container", default=None, help=hidden)
