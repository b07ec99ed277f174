"""`distrain run`: torchrun's elastic agent with the sharp edges removed.

The launch itself is torch's: the arguments are parsed by ``torch.distributed.run``'s own
parser and handed to ``torch.distributed.run.run``.  distrain adds:

- script arguments are split off *before* parsing, so ``train.py --n 5`` or ``--log x`` never
  trips torchrun's "ambiguous option" prefix matching, and no launcher flag is abbreviated;
- ``-n/--nproc N|auto``, ``--gpus 0,3``, ``--legacy-local-rank``, ``--dry-run``;
- on one node a free port is always used (c10d rendezvous on port 0) unless one is named, and a
  named port that is busy is a one-line error instead of an ``Address already in use`` trace;
- ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: workers get their own store instead of sharing the
  agent's, which makes restarts and late-joining nodes reliable (pytorch#135712);
- ``OMP_NUM_THREADS`` = usable cores / processes per node instead of torchrun's fixed 1;
- the exit code is the failed worker's own (128+N for a signal), with a one-line summary;
- ``--start-method fast`` (default): workers are forked from a server that imported torch while
  the launcher was starting, instead of each paying for ``import torch`` (see fastboot.py).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from dataclasses import dataclass, field

from . import fastboot
from .errors import UsageError, fail, raise_usage_errors
from .launchers import LAUNCHERS, run_with_launcher
from .multinode import NetworkChoice, plan_network
from .threads import usable_cores

#: exit code of ranks stopped by distrain.watchdog (kept here so the launcher need not import torch)
WATCHDOG_EXIT_CODE = 124

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
}


def _torchrun_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = PROG
    parser.allow_abbrev = False
    parser.description = "Launch a training script on N processes (torchrun's flags accepted)."
    parser.add_argument("-n", "--nproc", default=None, help="processes per node: an integer or 'auto' (GPUs, else CPU cores)")
    parser.add_argument("--gpus", default=None, help="GPU indices to use, e.g. 0,3 (sets CUDA_VISIBLE_DEVICES and nproc)")
    parser.add_argument(
        "--legacy-local-rank", "--legacy_local_rank", action="store_true", help="pass --local_rank=N to the script, for old scripts"
    )
    parser.add_argument("--dry-run", "--dry_run", action="store_true", help="print the equivalent torchrun command; run nothing")
    parser.add_argument("--run-dir", "--run_dir", default=None, help="per-rank metrics and TensorBoard go here (for distrain top); default: --log-dir")
    parser.add_argument("--iface", default=None, help="network interface to the other nodes (default: the one routing to the master)")
    parser.add_argument("--launcher", default="torchrun", choices=LAUNCHERS, help="process launcher (mpirun/horovodrun: one node)")
    parser.add_argument(
        "--watchdog", default=None, metavar="SECONDS", help="abort with every rank's stack when no rank makes progress this long"
    )

    raise_usage_errors(parser)
    fastboot.extend_parser(parser)
    return parser


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
            raise UsageError(f"unknown option {name} (see distrain run --help; script options go after the script)")
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

    def torchrun_command(self) -> list[str]:
        """The equivalent `torchrun` command line."""
        a = self.args
        cmd = ["torchrun", "--nnodes", str(a.nnodes), "--nproc-per-node", str(a.nproc_per_node)]
        if a.rdzv_backend != "static" or a.rdzv_endpoint:
            cmd += ["--rdzv-backend", a.rdzv_backend, "--rdzv-endpoint", a.rdzv_endpoint, "--rdzv-id", a.rdzv_id]
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
    launcher_argv, rest = split_argv(argv, _option_table(parser))
    if not rest:
        raise UsageError("no training script given (usage: distrain run [options] script.py [script args])")
    script, script_args = rest[0], rest[1:]
    args = parser.parse_args(launcher_argv + [script])
    args.training_script_args = list(script_args)

    env: dict[str, str] = {}
    nproc = _resolve_nproc(args, env)
    args.nproc_per_node = str(nproc)

    if not (args.module or args.no_python) and not os.path.isfile(script):
        raise UsageError(f"script not found: {script}")
    if args.master_port is not None:
        _check_master_port(args)
    if args.legacy_local_rank:
        from torch.distributed.elastic.utils.api import macros

        # the agent substitutes ${local_rank} per worker, as torch.distributed.launch did
        args.training_script_args.append(f"--local_rank={macros.local_rank}")

    network = plan_network(args, env, args.iface)
    if args.watchdog is not None:
        from .watchdog import parse_seconds

        env["DISTRAIN_WATCHDOG"] = str(parse_seconds(args.watchdog, "--watchdog"))
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"))
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, usable_cores() // nproc))
    env["DISTRAIN_LAUNCHER"] = "distrain-run"
    if args.run_dir or args.log_dir:  # workers' ctx.log() writes there (distrain.monitor)
        env["DISTRAIN_RUN_DIR"] = os.path.abspath(args.run_dir or args.log_dir)
    return LaunchPlan(args, env, network)


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
            raise UsageError(f"--gpus {args.gpus}: GPU {missing[0]} does not exist ({count} GPU(s) visible)")
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
                raise UsageError(f"--nproc-per-node expects an integer or auto (got {value!r})") from None
    elif explicit_per_node and str(args.nproc_per_node) not in ("1", str(nproc)):
        raise UsageError(f"--nproc-per-node {args.nproc_per_node} disagrees with --nproc/--gpus ({nproc})")
    if nproc < 1:
        raise UsageError(f"the number of processes must be at least 1 (got {nproc})")
    return nproc


def _check_master_port(args: argparse.Namespace) -> None:
    from .net import port_in_use

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


def _exit_code_of(err: BaseException) -> tuple[int, str]:
    failures = getattr(err, "failures", {}) or {}
    if not failures:
        return 1, str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    # a rank that wrote an error file raised the root cause; the others only lost their peer,
    # and the launcher's own SIGTERM of the survivors is never the cause
    causes = {r: f for r, f in failures.items() if int(f.exitcode) != -signal.SIGTERM} or failures
    rank, first = min(causes.items(), key=lambda kv: (not os.path.isfile(kv[1].error_file), kv[1].timestamp))
    code = int(first.exitcode)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return 128 - code, f"rank {rank} (pid {first.pid}) was killed by {name}"
    if code == WATCHDOG_EXIT_CODE:
        return code, f"stopped by the watchdog (rank {rank} exited with {code}; see 'distrain watchdog:' above)"
    message = first.message.get("message", "") if isinstance(first.message, dict) else first.message
    cause = f": {message}" if os.path.isfile(first.error_file) and message else ""
    return code or 1, f"rank {rank} (pid {first.pid}) exited with code {code}{cause}"


def _print_network(launch: LaunchPlan) -> None:
    choice = launch.network
    assert choice is not None
    a = launch.args
    static = a.rdzv_backend == "static" and not a.rdzv_endpoint
    node = f"node {a.node_rank}/{a.nnodes}" if static else f"elastic node ({a.nnodes} nodes)"
    for warning in choice.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
    print(choice.summary(node), file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """Entry point of `distrain run`; returns the job's exit code."""
    started = fastboot.early_start(argv)  # its `import torch` overlaps ours (plan imports torch)
    try:
        launch = plan(argv)
    except UsageError as err:
        if started:
            fastboot.stop_server()
        fail(PROG, str(err), err.exit_code)
    if launch.network is not None:
        _print_network(launch)
    if launch.args.dry_run and launch.args.launcher != "torchrun":
        from .launchers import command_for

        try:
            print(shlex.join(command_for(launch.args, launch.env)))
        except UsageError as err:
            fail(PROG, str(err), err.exit_code)
        return 0
    if launch.args.dry_run:
        env_line = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(launch.env.items()))
        print(env_line + (" " if env_line else "") + shlex.join(launch.torchrun_command()))
        return 0
    os.environ.update(launch.env)
    try:
        return _launch(launch)
    finally:  # idle now; don't leave it holding our stdout (it may still be preloading)
        fastboot.stop_server()


def _launch(launch: LaunchPlan) -> int:
    if launch.args.launcher != "torchrun":
        try:
            return run_with_launcher(launch.args, launch.env)
        except UsageError as err:
            fail(PROG, str(err), err.exit_code)
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        fastboot.run(launch.args)
    except ChildFailedError as err:
        code, summary = _exit_code_of(err)
        print(f"{PROG}: job failed: {summary}", file=sys.stderr, flush=True)
        return code
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # rendezvous/store errors: one line, not torch's trace
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"{PROG}: error: {type(err).__name__}: {first}", file=sys.stderr, flush=True)
        return 1
    return 0
