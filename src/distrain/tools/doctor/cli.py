"""`distrain doctor` options, and the choice between this machine and all ranks."""

from __future__ import annotations

import argparse
import time

from distrain.errors import UsageError, fail, raise_usage_errors
from distrain.tools.doctor.all_ranks.links import DEFAULT_STEP_S
from distrain.tools.doctor.check import worst
from distrain.tools.doctor.machine.local import Options, run_checks
from distrain.tools.doctor.machine.network import DEFAULT_PORTS
from distrain.tools.doctor.report import document, print_json, print_table

PROG = "distrain doctor"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description=(
            "Check this machine for distributed training and explain each problem with its fix. "
            "Under a launcher (or with --nproc N) every rank checks in and the ranks are compared."
        ),
    )
    p.add_argument(
        "--json", action="store_true", help="print the JSON document (schema: docs/doctor.md)"
    )
    p.add_argument(
        "--master-addr", default=None, help="check that this address (the master node) is reachable"
    )
    p.add_argument(
        "--master-port",
        type=int,
        default=None,
        help="with --master-addr: also try a TCP connection to this port",
    )
    p.add_argument(
        "--ports",
        default=",".join(map(str, DEFAULT_PORTS)),
        help="ports that should be free here (default 29500,29400)",
    )
    p.add_argument(
        "--expect-gpu", action="store_true", help="a missing GPU is a failure, not a note"
    )
    p.add_argument(
        "-n",
        "--nproc",
        type=int,
        default=None,
        help="run the all-ranks check on N local processes via distrain run",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="all-ranks: seconds to wait for a missing rank (default 30)",
    )
    p.add_argument(
        "--bandwidth-bytes",
        default="16M",
        help="all-ranks: all-reduce size for the bandwidth test (default 16M)",
    )
    p.add_argument(
        "--model-params",
        default="25.6M",
        help="all-ranks: parameters of the model you train (K/M/G = 10^3/10^6/10^9; default 25.6M, "
        "ResNet-50), for the link check",
    )
    p.add_argument(
        "--step-time",
        type=float,
        default=DEFAULT_STEP_S,
        help=f"all-ranks: seconds of computation per training step (default {DEFAULT_STEP_S}); a "
        "link whose gradient "
        "all-reduce takes longer is named",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="only check this process's machine, even under a launcher",
    )
    p.add_argument(
        "--hosts",
        default=None,
        help="run the all-ranks check on these hosts over ssh (h1,h2; see distrain run --hosts)",
    )
    p.add_argument(
        "--hostfile", default=None, help="like --hosts, from a file of `host slots=N` lines"
    )
    p.add_argument(
        "--ssh-opts", default=None, help="with --hosts/--hostfile: options for ssh, e.g. '-F cfg'"
    )

    raise_usage_errors(p)
    return p


def _options(args: argparse.Namespace) -> Options:
    try:
        ports = tuple(int(p) for p in str(args.ports).split(",") if p.strip())
    except ValueError:
        raise UsageError(f"--ports expects comma-separated numbers (got {args.ports!r})") from None
    for port in ports + ((args.master_port,) if args.master_port is not None else ()):
        if not 0 < port < 65536:
            raise UsageError(f"port {port} is outside 1..65535")
    if args.master_port is not None and not args.master_addr:
        raise UsageError("--master-port needs --master-addr")
    if args.nproc is not None and args.nproc < 1:
        raise UsageError(f"--nproc must be at least 1 (got {args.nproc})")
    from distrain.tools.bench.comm import parse_bytes

    args.bandwidth_bytes = parse_bytes(str(args.bandwidth_bytes))
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    args.model_params = parse_count(str(args.model_params))
    if args.step_time <= 0:
        raise UsageError("--step-time must be positive")
    return Options(args.master_addr, args.master_port, ports, args.expect_gpu)


def parse_count(text: str) -> int:
    """'25.6M' → 25_600_000 (K, M, G are powers of 1000); UsageError for anything else."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9}.get(text.strip()[-1:].upper(), 1.0)
    number = text.strip()[:-1] if scale != 1.0 else text.strip()
    try:
        value = float(number) * scale
    except ValueError:
        raise UsageError(
            f"--model-params expects a count like 11M or 25.6M (got {text!r})"
        ) from None
    if not 1 <= value < 1e13:
        raise UsageError(f"--model-params must be a positive count (got {text!r})")
    return round(value)  # to the nearest: 2.01 * 1e3 is 2009.9999999999998 in binary


def _launched_world() -> int:
    from distrain.cluster import ClusterError, detect_environment

    try:
        return detect_environment().world_size()
    except ClusterError:
        return 1


def main(argv: list[str]) -> int:
    """Entry point of `distrain doctor`; exit code 1 when any check fails."""
    start = time.perf_counter()
    try:
        args = _parser().parse_args(argv)
        opts = _options(args)
        if not args.local and _launched_world() > 1:
            from distrain.tools.doctor.all_ranks.ranks import run_all_ranks

            return run_all_ranks(
                opts,
                args.timeout,
                args.bandwidth_bytes,
                args.json,
                start,
                args.model_params,
                args.step_time,
            )
    except UsageError as err:
        fail(PROG, str(err), err.exit_code)
    if (args.hosts or args.hostfile) and not args.local:
        from distrain.launch.relaunch import relaunch_on_hosts

        named = [
            ("--hosts", args.hosts),
            ("--hostfile", args.hostfile),
            ("--ssh-opts", args.ssh_opts),
        ]
        return relaunch_on_hosts(
            "distrain.tools.doctor",
            argv,
            _parser(),
            [t for k, v in named if v for t in (k, v)],
            args.nproc or 1,
        )
    if args.nproc is not None and not args.local:
        from distrain.launch.relaunch import relaunch

        return relaunch("distrain.tools.doctor", argv, _parser(), args.nproc)
    checks = run_checks(opts)
    doc = document(checks, time.perf_counter() - start)
    if args.json:
        print_json(doc)
    else:
        print_table(doc)
    return 1 if worst(checks) == "fail" else 0
