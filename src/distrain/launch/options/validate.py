"""Sanity checks on torchrun's own numeric flags, as one-line usage errors.

torchrun's parser accepts ``--nnodes 0`` or ``--max-restarts -1`` and fails later with an
``AssertionError`` or a hang; `distrain run` refuses them before anything starts.
"""

from __future__ import annotations

import argparse
import os

from distrain.errors import UsageError


def _int(value: object, flag: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise UsageError(f"{flag} expects an integer (got {value!r})") from None


def _min_max(text: str) -> tuple[int, int] | None:
    """torch's own reading of ``--nnodes`` (``parse_min_max_nnodes``, what torchrun's agent reads
    it with), or None where it raises: the one reading of ``--nnodes`` in the launcher."""
    from torch.distributed.run import parse_min_max_nnodes

    try:
        low, high = parse_min_max_nnodes(text)
    except (ValueError, RuntimeError):  # torch: int() of a part, or more than two parts
        return None
    return low, high


def node_range(nnodes: object) -> tuple[int, int]:
    """(min, max) of ``--nnodes N`` or ``--nnodes MIN:MAX``; UsageError unless 1 <= MIN <= MAX."""
    text = str(nnodes)
    read = _min_max(text)
    if read is None:
        raise UsageError(f"--nnodes expects N or MIN:MAX (got {text!r})")
    low, high = read
    if low < 1 or high < low:
        raise UsageError(f"--nnodes {text}: needs 1 <= MIN <= MAX nodes")
    return low, high


def node_range_or_none(nnodes: object) -> tuple[int, int] | None:
    """(min, max) of a well-formed ``--nnodes`` (1 <= MIN <= MAX), else None (for a caller that
    says what is wrong in its own words: the fan-out to hosts)."""
    read = _min_max(str(nnodes))
    return read if read is not None and 1 <= read[0] <= read[1] else None


def check_launch_numbers(args: argparse.Namespace) -> int:
    """Refuse numbers torchrun would choke on: nodes (one for ``--launcher mpirun`` &
    co.), node rank, restarts, monitor interval; the most nodes ``--nnodes`` allows (the plan
    reads it here once)."""
    _, high = node_range(args.nnodes)
    if args.launcher != "torchrun" and high > 1:
        raise UsageError(
            f"--launcher {args.launcher} runs on one node here; use the default launcher "
            "for --nnodes > 1"
        )
    if _int(args.max_restarts, "--max-restarts") < 0:
        raise UsageError(f"--max-restarts must be 0 or more (got {args.max_restarts})")
    node_rank = _int(args.node_rank, "--node-rank")
    if not 0 <= node_rank < high:
        raise UsageError(
            f"--node-rank {node_rank} is outside 0..{high - 1} (--nnodes {args.nnodes})"
        )
    try:
        interval = float(args.monitor_interval)
    except (TypeError, ValueError):
        raise UsageError(
            f"--monitor-interval expects seconds (got {args.monitor_interval!r})"
        ) from None
    if not interval > 0 or interval == float("inf"):
        raise UsageError(
            f"--monitor-interval must be a positive number of seconds (got {args.monitor_interval})"
        )
    return high


def nproc_number(value: str) -> int | None:
    """``-n/--nproc`` as given: its number, or None for ``auto``; UsageError for anything else."""
    if value == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--nproc expects an integer or 'auto' (got {value!r})") from None


def at_least_one(nproc: int) -> None:
    """UsageError unless `nproc` processes per node is at least 1."""
    if nproc < 1:
        raise UsageError(f"the number of processes must be at least 1 (got {nproc})")


def check_script(script: str) -> None:
    """The training script must be a file (a directory or a missing path is a usage error)."""
    if os.path.isdir(script):
        raise UsageError(f"{script} is a directory, not a training script")
    if not os.path.isfile(script):
        raise UsageError(f"script not found: {script}")


def check_master_port(args: argparse.Namespace) -> None:
    """UsageError for a ``--master-port`` that is not a port, or busy where this node would
    listen on it (node 0 of a static job)."""
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
