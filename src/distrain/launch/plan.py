"""Planning a `distrain run`: from the command line to a frozen LaunchPlan.

The command line is split once (launch/command_line.py) and its launcher options are parsed by
torchrun's own parser with distrain's options added.  plan() resolves the processes, the
network, the rendezvous and the start method, and returns a frozen :class:`LaunchPlan`: nothing
changes it afterwards.  torch's agent gets an ``argparse.Namespace`` built from the plan in one
place (:meth:`LaunchPlan.agent_args`); the environment distrain adds for the workers is in
:mod:`distrain.contract`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from distrain.contract import LAUNCHER, NO_SHARED_STORE, RUN_DIR, WATCHDOG
from distrain.errors import UsageError
from distrain.launch import rendezvous, usage
from distrain.launch.agent_store import StoreSpec, plan_store
from distrain.launch.command_line import PROG, CommandLine, run_parser, split
from distrain.launch.fast_start.forkserver import StartMethod, choose_start
from distrain.launch.network import NetworkChoice, loopback_interface, plan_network
from distrain.launch.rendezvous import Rendezvous
from distrain.launch.self_start import detect as selfstart
from distrain.launch.validate import (
    at_least_one,
    check_launch_numbers,
    check_script,
    nproc_number,
)
from distrain.process.cores import usable_cores
from distrain.settings import parse_seconds


class FrozenArgs(argparse.Namespace):
    """torchrun's and distrain's options after planning, read-only: the plan is final."""

    def __init__(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the launch plan is final: {name} cannot change")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"the launch plan is final: {name} cannot change")


@dataclass(frozen=True)
class LaunchPlan:
    """What `distrain run` decided, final: options, rendezvous, network, start method, env."""

    #: the options as resolved (processes per node, this node's address, rendezvous conf):
    #: what --dry-run's torchrun command shows
    args: FrozenArgs
    #: the command line, split once
    command: CommandLine
    #: the rendezvous the agent uses (torchrun's defaults and the loopback store applied)
    rendezvous: Rendezvous
    start: StartMethod
    #: the environment distrain adds for the workers
    env: Mapping[str, str]
    network: NetworkChoice | None = None
    #: the agent's store the launcher starts (one node), or None
    agent_store: StoreSpec | None = None
    #: --cpu: what stands in for what (printed when the job starts)
    rehearsal_line: str = ""
    #: a script that starts its own workers: what was seen (printed when the job starts)
    selfstart_line: str = ""

    def agent_args(self, rdzv: Rendezvous | None = None) -> argparse.Namespace:
        """torch's Namespace for ``config_from_args``: the one place it is built from the plan.

        `rdzv`: the plan's rendezvous once its store listens (Rendezvous.on_port).
        """
        r = rdzv or self.rendezvous
        values = dict(vars(self.args))
        values.update(
            rdzv_backend=r.backend, rdzv_endpoint=r.endpoint, rdzv_id=r.id, rdzv_conf=r.conf,
            nnodes=r.nnodes, node_rank=r.node_rank, master_addr=r.master_addr,
            master_port=r.master_port, local_addr=r.local_addr, standalone=r.standalone,
            start_method=self.start.method,
            # the forked workers run through torch's callable entrypoint: [script, *script args]
            run_path=self.args.run_path or self.start.method != "spawn",
            training_script_args=list(self.args.training_script_args),
        )  # fmt: skip
        return argparse.Namespace(**values)

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


def plan(command: CommandLine | Sequence[str]) -> LaunchPlan:
    """Plan a `distrain run` from its command line (split, or a list of tokens); raise
    UsageError on bad input.  Reads the machine (GPUs, cores, interfaces) and the environment,
    never ``sys.argv``."""
    if not isinstance(command, CommandLine):
        command = split(command)
    parser = run_parser()
    if command.has("help"):  # before the script (an unknown option before it is a switch)
        parser.print_help()
        raise SystemExit(0)
    parsed = usage.parse(command, parser)  # the words launch/usage.py says before torch
    args = dict(vars(parsed), training_script_args=tuple(command.script_args))
    return _plan(command, parsed, args)


def _plan(command: CommandLine, parsed: argparse.Namespace, args: dict[str, Any]) -> LaunchPlan:
    script = parsed.training_script
    env: dict[str, str] = {}
    if parsed.cpu and parsed.gpus is not None:  # before --gpus is checked against the GPUs
        raise UsageError("--cpu rehearses on CPU processes; it cannot be combined with --gpus")
    nproc = _resolve_nproc(parsed, env)
    args["nproc_per_node"] = str(nproc)

    check_launch_numbers(parsed)
    if not (parsed.module or parsed.no_python):
        check_script(script)
    if parsed.master_port is not None:
        _check_master_port(parsed)
    if parsed.legacy_local_rank:
        from torch.distributed.elastic.utils.api import macros

        # the agent substitutes ${local_rank} per worker, as torch.distributed.launch did
        args["training_script_args"] = (
            *args["training_script_args"],
            f"--local_rank={macros.local_rank}",
        )

    network = plan_network(parsed, env, parsed.iface)
    if network is not None:
        args["local_addr"] = parsed.local_addr or network.address
        if network.is_host is not None:
            extra = f"is_host={int(network.is_host)}"
            args["rdzv_conf"] = ",".join(x for x in [parsed.rdzv_conf, extra] if x)
    args["rdzv_conf"] = rendezvous.node_loss_conf(
        parsed.rdzv_backend, parsed.nnodes, args["rdzv_conf"] or ""
    )
    if network is None:  # one node: gloo/NCCL listen on loopback too (see launch/agent_store.py)
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            env.setdefault(var, os.environ.get(var, loopback_interface()))
    if parsed.watchdog is not None:
        env[WATCHDOG] = str(parse_seconds(parsed.watchdog, "--watchdog"))
    env.setdefault(NO_SHARED_STORE, os.environ.get(NO_SHARED_STORE, "1"))
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, usable_cores() // nproc))
    env[LAUNCHER] = "distrain-run"
    if parsed.run_dir or parsed.log_dir:  # workers' ctx.log() writes there (distrain.monitor)
        env[RUN_DIR] = os.path.abspath(parsed.run_dir or parsed.log_dir)
    line = once = ""
    reads_script = not (parsed.module or parsed.no_python)
    # a guess that depends on the script's arguments never wins silently
    # (launch/self_start/detect.py)
    found, note = selfstart.decide(script, parsed.self_starting) if reads_script else (None, "")
    if parsed.cpu:
        from distrain.launch.rehearse import environment as rehearsal

        agents, line = rehearsal.configure(script, nproc, env, found)
        args["nproc_per_node"] = str(agents)
        once = f"{PROG}: {note}" if note else ""
    elif reads_script and parsed.launcher == "torchrun":
        if (
            found is not None
        ):  # run once: its own children are the job (launch/self_start/detect.py)
            selfstart.refuse_nodes(found, os.path.basename(script), parsed.nnodes)
            selfstart.mark(env)
            once = found.start_line(PROG, os.path.basename(script), nproc)
            args["nproc_per_node"] = "1"
        elif note:
            once = f"{PROG}: {note}"
    final = FrozenArgs(**args)
    rdzv, store = plan_store(Rendezvous.from_args(final))
    start = choose_start(final)
    return LaunchPlan(
        final, command, rendezvous.torch_defaults(rdzv), start, MappingProxyType(env),
        network, store, line, once,
    )  # fmt: skip


def _resolve_nproc(args: argparse.Namespace, env: dict[str, str]) -> int:
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
        n = nproc_number(value)
        if n is None:  # auto
            n = nproc or _visible_gpu_count() or usable_cores()
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
    elif str(args.nproc_per_node) not in ("1", str(nproc)):  # "1": torchrun's default
        raise UsageError(
            f"--nproc-per-node {args.nproc_per_node} disagrees with --nproc/--gpus ({nproc})"
        )
    at_least_one(nproc)
    return nproc


def _check_master_port(args: argparse.Namespace) -> None:
    from distrain.net import port_in_use

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
