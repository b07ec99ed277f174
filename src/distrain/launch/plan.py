"""Planning a `distrain run`: split and parse the arguments, resolve processes, ports and network.

torchrun's own parser (``torch.distributed.run.get_args_parser``) reads the launcher flags;
distrain's flags are added to it.  The result is a :class:`LaunchPlan`: torchrun's namespace
plus the environment distrain adds for the workers (see :mod:`distrain.contract`).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from ..contract import LAUNCHER, NO_SHARED_STORE, RUN_DIR, WATCHDOG, parse_seconds, usable_cores
from ..errors import UsageError, raise_usage_errors
from . import forkserver, rehearsal, rendezvous, selfstart
from .mpi import LAUNCHERS
from .network import NetworkChoice, loopback_interface, plan_network
from .validate import check_launch_numbers, check_script

PROG = "distrain run"

#: distrain's own options: name → takes a value
_OWN_OPTIONS: dict[str, bool] = {
    "-n": True,
    "--nproc": True,
    "--gpus": True,
    "--legacy-local-rank": False,
    "--legacy_local_rank": False,
    "--dry-run": False,
    "--dry_run": False,
    "--run-dir": True,
    "--run_dir": True,
    "--iface": True,
    "--launcher": True,
    "--watchdog": True,
    "--cpu": False,
    "--self-starting": False,
    "--no-self-starting": False,
    "--replicas": True,
}


def _torchrun_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = PROG
    parser.allow_abbrev = False
    parser.description = "Launch a training script on N processes (torchrun's flags accepted)."
    parser.epilog = "Many machines from this one: --hosts h1:N,h2:N or --hostfile FILE (see distrain run --hosts h --help)."
    parser.add_argument(
        "-n",
        "--nproc",
        default=None,
        help="processes per node: an integer or 'auto' (GPUs, else CPU cores)",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        help="GPU indices to use, e.g. 0,3 (sets CUDA_VISIBLE_DEVICES and nproc)",
    )
    parser.add_argument(
        "--legacy-local-rank",
        "--legacy_local_rank",
        action="store_true",
        help="pass --local_rank=N to the script, for old scripts",
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        action="store_true",
        help="print the equivalent torchrun command; run nothing",
    )
    parser.add_argument(
        "--run-dir",
        "--run_dir",
        default=None,
        help="per-rank metrics and TensorBoard go here (for distrain top); default: --log-dir",
    )
    parser.add_argument(
        "--iface",
        default=None,
        help="network interface to the other nodes (default: the one routing to the master)",
    )
    parser.add_argument(
        "--launcher",
        default="torchrun",
        choices=LAUNCHERS,
        help="process launcher (mpirun/horovodrun: one node)",
    )
    parser.add_argument(
        "--watchdog",
        default=None,
        metavar="SECONDS",
        help="abort with every rank's stack when no rank makes progress this long",
    )

    parser.add_argument(
        "--cpu",
        action="store_true",
        help="rehearse a CUDA/NCCL script on N CPU processes: cuda → cpu, nccl → gloo, unmodified",
    )
    parser.add_argument(
        "--self-starting",
        dest="self_starting",
        action="store_const",
        const=True,
        default=None,
        help="the script starts its own workers (mp.spawn, Process): run it once (default: read from the script)",
    )
    parser.add_argument(
        "--no-self-starting",
        dest="self_starting",
        action="store_const",
        const=False,
        help="run N copies as torchrun would, even if the script seems to start its own workers",
    )
    parser.add_argument(
        "--replicas",
        default=None,
        metavar="R",
        help="R fault-tolerant replica groups of -n processes each (TorchFT; pip install 'distrain[ft]')",
    )

    raise_usage_errors(parser)
    forkserver.extend_parser(parser)
    _forward_usr1(parser)
    return parser


def _forward_usr1(parser: argparse.ArgumentParser) -> None:
    """Handle and forward SIGUSR1 too: SLURM's time-limit warning (`sbatch --signal=USR1@N`).

    Unhandled, SIGUSR1 kills the agent outright and orphans the workers; handled, the agent
    passes it on and waits for them to checkpoint (train/signals.py), as it does for SIGTERM.
    """
    for action in parser._actions:
        if action.dest == "signals_to_handle" and "SIGUSR1" not in str(action.default).split(","):
            action.default = f"{action.default},SIGUSR1"


def option_table() -> dict[str, bool]:
    """Every `distrain run` option -> whether it takes a value."""
    return _option_table(_torchrun_parser())


def _option_table(parser: argparse.ArgumentParser) -> dict[str, bool]:
    table = dict(_OWN_OPTIONS)
    for action in parser._actions:
        for opt in action.option_strings:
            table[opt] = action.nargs != 0
    return table


def split_argv(argv: list[str], options: dict[str, bool]) -> tuple[list[str], list[str]]:
    """Split into launcher arguments and [script, *script_args] at the first non-option token."""
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1 :]
        if not tok.startswith("-") or tok == "-":
            return argv[:i], argv[i:]
        name = tok.split("=", 1)[0]
        if name not in options:
            raise UsageError(
                f"unknown option {name} (see distrain run --help; script options go after the script)"
            )
        if options[name] and "=" not in tok:
            i += 1
        i += 1
    return argv, []


@dataclass
class LaunchPlan:
    """What `distrain run` decided: torchrun's parsed args plus the environment it adds."""

    args: argparse.Namespace
    env: dict[str, str] = field(default_factory=dict)
    network: NetworkChoice | None = None
    #: --cpu: what stands in for what (printed when the job starts)
    rehearsal_line: str = ""
    #: the command line split at the script: launcher options, then [script, *script args]
    launcher_argv: list[str] = field(default_factory=list)
    script_argv: list[str] = field(default_factory=list)
    #: a script that starts its own workers: what was seen (printed when the job starts)
    selfstart_line: str = ""
    #: every launcher option -> whether it takes a value (to split launcher_argv again)
    takes_value: dict[str, bool] = field(default_factory=dict)

    def torchrun_command(self) -> list[str]:
        """The equivalent `torchrun` command line."""
        a = self.args
        cmd = ["torchrun", "--nnodes", str(a.nnodes), "--nproc-per-node", str(a.nproc_per_node)]
        if a.rdzv_backend != "static" or a.rdzv_endpoint:
            cmd += [
                "--rdzv-backend",
                a.rdzv_backend,
                "--rdzv-endpoint",
                a.rdzv_endpoint,
                "--rdzv-id",
                a.rdzv_id,
            ]
            if a.rdzv_conf:
                cmd += ["--rdzv-conf", a.rdzv_conf]
        else:
            cmd += ["--node-rank", str(a.node_rank), "--master-addr", a.master_addr]
            if a.master_port is not None:
                cmd += ["--master-port", str(a.master_port)]
        if a.standalone:
            cmd.append("--standalone")
        if int(a.max_restarts):
            cmd += ["--max-restarts", str(a.max_restarts)]
        if a.log_dir:
            cmd += ["--log-dir", a.log_dir]
        if a.local_addr:
            cmd += ["--local-addr", a.local_addr]
        if a.module:
            cmd.append("-m")
        if a.no_python:
            cmd.append("--no-python")
        cmd.append(a.training_script)
        # torchrun itself needs "--" to stop prefix-matching script options
        script_args = list(a.training_script_args)
        if any(s.startswith("-") for s in script_args):
            cmd.append("--")
        return cmd + script_args


def _visible_gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def plan(argv: list[str]) -> LaunchPlan:
    """Parse `distrain run` arguments into a LaunchPlan; raise UsageError on bad input."""
    parser = _torchrun_parser()
    if any(tok in ("-h", "--help") for tok in argv[: _script_index(argv, parser)]):
        parser.print_help()
        raise SystemExit(0)
    takes_value = _option_table(parser)
    launcher_argv, rest = split_argv(argv, takes_value)
    if not rest:
        raise UsageError(
            "no training script given (usage: distrain run [options] script.py [script args])"
        )
    script, script_args = rest[0], rest[1:]
    args = parser.parse_args(launcher_argv + [script])
    args.training_script_args = list(script_args)

    env: dict[str, str] = {}
    if args.cpu and args.gpus is not None:  # before --gpus is checked against the GPUs there are
        raise UsageError("--cpu rehearses on CPU processes; it cannot be combined with --gpus")
    nproc = _resolve_nproc(args, env)
    args.nproc_per_node = str(nproc)

    check_launch_numbers(args)
    if not (args.module or args.no_python):
        check_script(script)
    if args.master_port is not None:
        _check_master_port(args)
    if args.legacy_local_rank:
        from torch.distributed.elastic.utils.api import macros

        # the agent substitutes ${local_rank} per worker, as torch.distributed.launch did
        args.training_script_args.append(f"--local_rank={macros.local_rank}")

    network = plan_network(args, env, args.iface)
    rendezvous.apply_defaults(args)
    if network is None:  # one node: gloo/NCCL listen on loopback too (see launch/agent_store.py)
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            env.setdefault(var, os.environ.get(var, loopback_interface()))
    if args.watchdog is not None:
        env[WATCHDOG] = str(parse_seconds(args.watchdog, "--watchdog"))
    env.setdefault(NO_SHARED_STORE, os.environ.get(NO_SHARED_STORE, "1"))
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, usable_cores() // nproc))
    env[LAUNCHER] = "distrain-run"
    if args.run_dir or args.log_dir:  # workers' ctx.log() writes there (distrain.monitor)
        env[RUN_DIR] = os.path.abspath(args.run_dir or args.log_dir)
    line = once = ""
    reads_script = not (args.module or args.no_python)
    # a guess that depends on the script's arguments never wins silently (launch/selfstart.py)
    found, note = selfstart.decide(script, args.self_starting) if reads_script else (None, "")
    if args.cpu:
        if args.gpus is not None:
            raise UsageError("--cpu rehearses on CPU processes; it cannot be combined with --gpus")
        agents, line = rehearsal.configure(script, nproc, env, found)
        args.nproc_per_node = str(agents)
        once = f"{PROG}: {note}" if note else ""
    elif reads_script and args.launcher == "torchrun":
        if found is not None:  # run once: its own children are the job (launch/selfstart.py)
            selfstart.mark(env)
            once = found.start_line(PROG, os.path.basename(script), nproc)
            args.nproc_per_node = "1"
        elif note:
            once = f"{PROG}: {note}"
    return LaunchPlan(args, env, network, line, launcher_argv, rest, once, takes_value)


def _script_index(argv: list[str], parser: argparse.ArgumentParser) -> int:
    try:
        launcher_argv, _ = split_argv(argv, _option_table(parser))
        return len(launcher_argv)
    except UsageError:
        return len(argv)


def _resolve_nproc(args: argparse.Namespace, env: dict[str, str]) -> int:
    explicit_per_node = args.nproc_per_node not in (None, "1", 1) or "--nproc-per-node" in sys.argv
    nproc: int | None = None
    if args.gpus is not None:
        ids = [g.strip() for g in str(args.gpus).split(",") if g.strip()]
        if not ids or not all(g.isdigit() for g in ids):
            raise UsageError(f"--gpus expects GPU indices like 0,3 (got {args.gpus!r})")
        count = _visible_gpu_count()
        missing = [g for g in ids if int(g) >= count]
        if missing:
            raise UsageError(
                f"--gpus {args.gpus}: GPU {missing[0]} does not exist ({count} GPU(s) visible)"
            )
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        nproc = len(ids)
    if args.nproc is not None:
        value = str(args.nproc)
        if value == "auto":
            n = nproc or _visible_gpu_count() or usable_cores()
        else:
            try:
                n = int(value)
            except ValueError:
                raise UsageError(f"--nproc expects an integer or 'auto' (got {value!r})") from None
        if nproc is not None and n != nproc:
            raise UsageError(f"--nproc {value} disagrees with --gpus {args.gpus} ({nproc} GPUs)")
        nproc = n
    if nproc is None:
        value = str(args.nproc_per_node)
        if value in ("auto", "gpu", "cpu"):
            nproc = (_visible_gpu_count() if value != "cpu" else 0) or usable_cores()
        else:
            try:
                nproc = int(value)
            except ValueError:
                raise UsageError(
                    f"--nproc-per-node expects an integer or auto (got {value!r})"
                ) from None
    elif explicit_per_node and str(args.nproc_per_node) not in ("1", str(nproc)):
        raise UsageError(
            f"--nproc-per-node {args.nproc_per_node} disagrees with --nproc/--gpus ({nproc})"
        )
    if nproc < 1:
        raise UsageError(f"the number of processes must be at least 1 (got {nproc})")
    return nproc


def _check_master_port(args: argparse.Namespace) -> None:
    from ..net import port_in_use

    try:
        port = int(args.master_port)
    except ValueError:
        raise UsageError(f"--master-port expects a number (got {args.master_port!r})") from None
    if not 0 < port < 65536:
        raise UsageError(f"--master-port {port} is outside 1..65535")
    hosts_store = args.rdzv_backend == "static" and int(args.node_rank) == 0
    if hosts_store and port_in_use(port):
        raise UsageError(
            f"port {port} is already in use on this machine (another job?); "
            "choose another --master-port, or leave it out on one node to get a free one"
        )
