"""Planning a `distrain run`: from the command line to a frozen LaunchPlan.

The command line is split once (launch/command_line.py) and its launcher options are parsed by
torchrun's own parser with distrain's options added.  plan() resolves the processes, the
network, the rendezvous and the start method, the features adjust it (launch/seam.py), and it
returns a frozen :class:`~distrain.launch.launch_plan.LaunchPlan`: nothing
changes it afterwards.  torch's agent gets an ``argparse.Namespace`` built from the plan in one
place (launch/agent.py ``agent_args``); the environment distrain adds for the workers is in
:mod:`distrain.contract`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from distrain.contract import LAUNCHER, NO_SHARED_STORE, RUN_DIR, WATCHDOG
from distrain.errors import UsageError
from distrain.launch.command_line import CommandLine, read_command_line, run_parser
from distrain.launch.launch_plan import FrozenArgs, LaunchPlan, StartMethod
from distrain.launch.nodes import rendezvous
from distrain.launch.nodes.agent_store import plan_store
from distrain.launch.nodes.network import loopback_interface, plan_network
from distrain.launch.nodes.rendezvous import Rendezvous
from distrain.launch.options.validate import (
    at_least_one,
    check_launch_numbers,
    check_master_port,
    check_script,
    nproc_number,
)
from distrain.launch.seam import Draft, Features
from distrain.process.cores import usable_cores
from distrain.settings import parse_seconds


def visible_gpu_count() -> int:
    """The GPUs torch sees (0 when it sees none, or cannot tell)."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def plan(command: CommandLine | Sequence[str], features: Features | None = None) -> LaunchPlan:
    """:func:`make_plan` from a command line (split, or a list of tokens read here) and the
    features it asks for unless `features` are given."""
    if not isinstance(command, CommandLine):
        command = read_command_line(command)
    return make_plan(command, features or Features().see(command))


NO_SCRIPT = "no training script given (usage: distrain run [options] script.py [script args])"


def parse_options(command: CommandLine, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The launcher's options and the script, parsed by `parser` (`distrain run`'s, with or
    without torch: launch/options/usage.py checks with this too); UsageError for no script, or a
    value the parser refuses (an unknown option was refused by read_command_line)."""
    if command.script is None:
        raise UsageError(NO_SCRIPT)
    return parser.parse_args([*command.launcher_argv, command.script])


def make_plan(command: CommandLine, features: Features) -> LaunchPlan:
    """Plan a `distrain run` from its command line; raise UsageError on bad input.  Reads the
    machine (GPUs, cores, interfaces) and the environment, never ``sys.argv``.  `features`:
    those the run uses (launch/seam.py), which adjust the plan before it is frozen."""
    parser = run_parser()
    if command.has("help"):  # before the script (an unknown option before it is a switch)
        parser.print_help()
        raise SystemExit(0)
    parsed = parse_options(command, parser)  # as launch/options/usage.py does before torch
    args = dict(vars(parsed), training_script_args=tuple(command.script_args))
    draft = _draft(command, parsed, args)
    features.adjust(draft)
    final = FrozenArgs(**draft.args)
    rdzv, store = plan_store(Rendezvous.from_args(final))
    return LaunchPlan(
        final,
        command,
        rendezvous.torch_defaults(rdzv),
        draft.start,
        MappingProxyType(draft.env),
        draft.network,
        store,
        tuple(draft.lines),
    )


def _draft(command: CommandLine, parsed: argparse.Namespace, args: dict[str, Any]) -> Draft:
    """The core's plan, before the features adjust it."""
    script = parsed.training_script
    env: dict[str, str] = {}
    if parsed.cpu and parsed.gpus is not None:  # before --gpus is checked against the GPUs
        raise UsageError("--cpu rehearses on CPU processes; it cannot be combined with --gpus")
    nproc = _resolve_nproc(parsed, env)
    args["nproc_per_node"] = str(nproc)

    nodes = check_launch_numbers(parsed)
    if not (parsed.module or parsed.no_python):
        check_script(script)
    if parsed.master_port is not None:
        check_master_port(parsed)
    if parsed.legacy_local_rank:
        from torch.distributed.elastic.utils.api import macros

        # the agent substitutes ${local_rank} per worker, as torch.distributed.launch did
        args["training_script_args"] = (
            *args["training_script_args"],
            f"--local_rank={macros.local_rank}",
        )

    network = plan_network(parsed, env, parsed.iface, nodes)
    if network is not None:
        args["local_addr"] = parsed.local_addr or network.address
        if network.is_host is not None:
            extra = f"is_host={int(network.is_host)}"
            args["rdzv_conf"] = ",".join(x for x in [parsed.rdzv_conf, extra] if x)
    args["rdzv_conf"] = rendezvous.node_loss_conf(
        parsed.rdzv_backend, nodes, args["rdzv_conf"] or ""
    )
    # one node: gloo/NCCL listen on loopback too (see launch/nodes/agent_store.py)
    if network is None:
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
    return Draft(command, parsed, args, env, nproc, StartMethod(parsed.start_method), [], network)


def _resolve_nproc(args: argparse.Namespace, env: dict[str, str]) -> int:
    nproc: int | None = None
    if args.gpus is not None:
        ids = [g.strip() for g in str(args.gpus).split(",") if g.strip()]
        if not ids or not all(g.isdigit() for g in ids):
            raise UsageError(f"--gpus expects GPU indices like 0,3 (got {args.gpus!r})")
        count = visible_gpu_count()
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
            n = nproc or visible_gpu_count() or usable_cores()
        if nproc is not None and n != nproc:
            raise UsageError(f"--nproc {value} disagrees with --gpus {args.gpus} ({nproc} GPUs)")
        nproc = n
    if nproc is None:
        value = str(args.nproc_per_node)
        if value in ("auto", "gpu", "cpu"):
            nproc = (visible_gpu_count() if value != "cpu" else 0) or usable_cores()
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
