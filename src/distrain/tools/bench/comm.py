"""Collective bandwidth like nccl-tests: all_reduce, all_gather, reduce_scatter, broadcast.

Run ``distrain bench comm -n 2`` (it launches itself through ``distrain run``) or put it under
any launcher: ``distrain run -n 4 -m distrain.tools.bench.comm``.  For each size (doubling from
``--min-bytes`` to ``--max-bytes``) it times ``--iters`` ops after ``--warmup`` ones and reports
the slowest rank's time per op, algbw = bytes / time and busbw = algbw × factor, where the factor
is nccl-tests' (all_reduce 2(n−1)/n, all_gather and reduce_scatter (n−1)/n, broadcast 1), so that
busbw is comparable to the link's bandwidth whatever n is.  Bytes are the all-reduced buffer,
the gathered output, the scattered input, the broadcast buffer — as in nccl-tests.  After timing,
each size is checked once with known data on every rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from distrain.errors import UsageError, fail, raise_usage_errors
from distrain.tools.bench.comm_format import human, parse_bytes, print_tables, sizes

PROG = "distrain bench comm"
SCHEMA_VERSION = 1
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
DTYPES = ("float32", "float64", "float16", "bfloat16")


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' algbw → busbw factor for `op` on `world` ranks."""
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter"):
        return (world - 1) / world
    if op == "broadcast":
        return 1.0
    raise ValueError(op)


@dataclass
class Buffers:
    """Tensors for one op at one size; `count` is the element count the bytes refer to."""

    op: str
    inp: Any
    out: Any
    count: int


def make_buffers(op: str, nbytes: int, world: int, device: Any, dtype: Any) -> Buffers:
    """Allocate `op`'s input/output for a `nbytes` buffer (rounded to whole elements per rank)."""
    import torch

    elsize = torch.empty((), dtype=dtype).element_size()
    count = max(1, nbytes // elsize)
    if op in ("all_gather", "reduce_scatter"):
        count = max(world, count - count % world)
    if op == "all_gather":
        return Buffers(
            op,
            torch.empty(count // world, dtype=dtype, device=device),
            torch.empty(count, dtype=dtype, device=device),
            count,
        )
    if op == "reduce_scatter":
        return Buffers(
            op,
            torch.empty(count, dtype=dtype, device=device),
            torch.empty(count // world, dtype=dtype, device=device),
            count,
        )
    buf = torch.empty(count, dtype=dtype, device=device)
    return Buffers(op, buf, buf, count)


def collective(op: str, group: Any = None) -> Callable[[Buffers], object]:
    """The torch.distributed call for `op` on Buffers (torch's own collectives, nothing else)."""
    import torch.distributed as dist

    # torch >= 2.14 renamed *_tensor to *_single; older releases only have the former
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    calls: dict[str, Callable[[Buffers], object]] = {
        "all_reduce": lambda b: dist.all_reduce(b.inp, group=group),
        "all_gather": lambda b: gather(b.out, b.inp, group=group),
        "reduce_scatter": lambda b: scatter(b.out, b.inp, group=group),
        "broadcast": lambda b: dist.broadcast(b.inp, src=0, group=group),
    }
    return calls[op]


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_op(
    op: str, nbytes: int, warmup: int, iters: int, device: Any, dtype: Any, group: Any = None
) -> tuple[float, int]:
    """Seconds per `op` on the slowest rank (and the element count), after `warmup` untimed ops."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    bufs = make_buffers(op, nbytes, world, device, dtype)
    bufs.inp.fill_(1)
    run = collective(op, group)
    for _ in range(warmup):
        run(bufs)
    _sync(device)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        run(bufs)
    _sync(device)
    elapsed = (time.perf_counter() - start) / iters
    slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return float(slowest.item()), bufs.count


def _pattern(count: int, device: Any, dtype: Any, offset: int = 0) -> Any:
    """(i + offset) % 13 as `dtype`: small integers, exact in every dtype and after summing."""
    import torch

    return ((torch.arange(count, device=device, dtype=torch.int64) + offset) % 13).to(dtype)


def check_op(op: str, nbytes: int, device: Any, dtype: Any, group: Any = None) -> list[int]:
    """Run `op` once on known data and compare with the exact answer → wrong elements per rank."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    bufs = make_buffers(op, nbytes, world, device, dtype)
    total = world * (world + 1) // 2  # sum over ranks of (rank + 1)
    if op == "all_reduce":
        bufs.inp.copy_(_pattern(bufs.count, device, dtype) + (rank + 1))
        expected = _pattern(bufs.count, device, dtype) * world + total
    elif op == "all_gather":
        chunk = bufs.count // world
        bufs.inp.copy_(_pattern(chunk, device, dtype) + (rank + 1))
        expected = torch.cat([_pattern(chunk, device, dtype) + (r + 1) for r in range(world)])
    elif op == "reduce_scatter":
        chunk = bufs.count // world
        bufs.inp.copy_(_pattern(bufs.count, device, dtype) + (rank + 1))
        expected = _pattern(chunk, device, dtype, offset=rank * chunk) * world + total
    else:
        bufs.inp.copy_(
            _pattern(bufs.count, device, dtype) + 1 if rank == 0 else torch.zeros_like(bufs.inp)
        )
        expected = _pattern(bufs.count, device, dtype) + 1
    collective(op, group)(bufs)
    wrong = torch.tensor(
        [int((bufs.out != expected).sum().item())], dtype=torch.int64, device=device
    )
    per_rank = [torch.zeros_like(wrong) for _ in range(world)]
    dist.all_gather(per_rank, wrong, group=group)
    return [int(t.item()) for t in per_rank]


@dataclass
class Row:
    """One line of results (the JSON ``results`` entries)."""

    op: str
    bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    correct: bool | None
    wrong_ranks: list[int]


def measure(
    op: str,
    nbytes: int,
    warmup: int,
    iters: int,
    device: Any,
    dtype: Any,
    check: bool = True,
    group: Any = None,
) -> Row:
    """Time and check `op` at `nbytes`; GB/s are 10^9 bytes per second, as in nccl-tests."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    seconds, count = time_op(op, nbytes, warmup, iters, device, dtype, group)
    real_bytes = count * make_buffers(op, 1, 1, "cpu", dtype).inp.element_size()
    algbw = real_bytes / seconds / 1e9
    correct: bool | None = None
    wrong_ranks: list[int] = []
    if check:
        wrong = check_op(op, nbytes, device, dtype, group)
        wrong_ranks = [r for r, n in enumerate(wrong) if n]
        correct = not wrong_ranks
    return Row(
        op,
        real_bytes,
        count,
        str(dtype).removeprefix("torch."),
        seconds * 1e6,
        algbw,
        algbw * bus_factor(op, world),
        correct,
        wrong_ranks,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
    p.add_argument(
        "-n",
        "--nproc",
        default="auto",
        help="processes to launch when not already under a launcher (default: auto)",
    )
    p.add_argument(
        "--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}"
    )
    p.add_argument(
        "-b", "--min-bytes", default="8", help="smallest size (default 8; K/M/G suffixes)"
    )
    p.add_argument("-e", "--max-bytes", default="64M", help="largest size (default 64M)")
    p.add_argument(
        "-f", "--step-factor", type=int, default=2, help="size multiplier between rows (default 2)"
    )
    p.add_argument("-w", "--warmup", type=int, default=5, help="untimed ops per size (default 5)")
    p.add_argument("-i", "--iters", type=int, default=20, help="timed ops per size (default 20)")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument(
        "--backend",
        default=None,
        choices=("gloo", "nccl"),
        help="default: nccl with GPUs, else gloo",
    )
    p.add_argument(
        "--device",
        default=None,
        choices=("cpu", "cuda"),
        help="default: cuda:<local rank> with GPUs, else cpu",
    )
    p.add_argument("--no-check", action="store_true", help="skip the per-size correctness check")
    p.add_argument("--json", action="store_true", help="print a JSON document instead of tables")
    p.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="also draw busbw against size per op into this PNG file",
    )

    raise_usage_errors(p)
    return p


def _validate(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise UsageError(
            f"unknown op {bad[0] if bad else args.ops!r} (choose from {', '.join(OPS)})"
        )
    lo, hi = parse_bytes(args.min_bytes), parse_bytes(args.max_bytes)
    if lo > hi:
        raise UsageError(
            f"--min-bytes {args.min_bytes} is larger than --max-bytes {args.max_bytes}"
        )
    if args.step_factor < 2:
        raise UsageError("--step-factor must be at least 2")
    if args.iters < 1 or args.warmup < 0:
        raise UsageError("--iters must be >= 1 and --warmup >= 0")
    plot = getattr(args, "plot", None)
    if plot and (
        not plot.lower().endswith(".png")
        or not os.path.isdir(os.path.dirname(os.path.abspath(plot)))
    ):
        raise UsageError(f"--plot {plot}: expected a .png file in an existing folder")
    return ops, sizes(lo, hi, args.step_factor)


def _launched_world() -> int | None:
    """World size when a launcher started this process, None for a plain process."""
    from distrain.cluster import SingleProcessEnvironment, detect_environment

    env = detect_environment()
    return None if isinstance(env, SingleProcessEnvironment) else env.world_size()


def _worker(args: argparse.Namespace, ops: list[str], size_list: list[int]) -> int:
    import torch

    from distrain import init

    ctx = init(backend=args.backend, device=args.device, verbose=False)
    try:
        dtype = getattr(torch, args.dtype)
        rows = [
            measure(op, n, args.warmup, args.iters, ctx.device, dtype, check=not args.no_check)
            for op in ops
            for n in size_list
        ]
        results = [asdict(r) for r in rows]
        busbw = [r.busbw_gbps for r in rows]
        doc = {
            "schema_version": SCHEMA_VERSION,
            "tool": "distrain bench comm",
            "world_size": ctx.world_size,
            "backend": ctx.backend,
            "device": ctx.device.type,
            "dtype": args.dtype,
            "warmup": args.warmup,
            "iters": args.iters,
            "ops": ops,
            "results": results,
            "summary": {
                "avg_busbw_gbps": sum(busbw) / len(busbw),
                "peak_busbw_gbps": max(busbw),
                "all_correct": all(r.correct is not False for r in rows),
            },
        }
        if ctx.is_main:
            if args.json:
                print(json.dumps(doc, indent=2), flush=True)
            else:
                print_tables(doc)
            if args.plot:
                from distrain.tools.bench.study.plots import comm_bandwidth

                comm_bandwidth(doc, Path(args.plot), human)
                print(f"{PROG}: wrote {args.plot}", file=sys.stderr, flush=True)
        return 0 if doc["summary"]["all_correct"] or not ctx.is_main else 1
    finally:
        ctx.shutdown()


def main(argv: list[str]) -> int:
    """Entry point of `distrain bench comm`."""
    try:
        args = _parser().parse_args(argv)
        ops, size_list = _validate(args)
        world = _launched_world()
        if (
            world is not None
            and world < 2
            or world is None
            and args.nproc.isdigit()
            and int(args.nproc) < 2
        ):
            raise UsageError("collectives need at least 2 processes (use -n 2 or more)")
    except UsageError as err:
        fail(PROG, str(err), err.exit_code)
    if world is not None:
        return _worker(args, ops, size_list)
    from distrain.launch.relaunch import relaunch

    return relaunch("distrain.tools.bench.comm", argv, _parser(), args.nproc)


if __name__ == "__main__":
    # run the functions of `distrain.tools.bench.comm` itself, not this __main__ copy of them, so
    # that one module object holds them (what imports or wraps distrain.tools.bench.comm sees what
    # runs)
    from distrain.tools.bench.comm import main as _main

    raise SystemExit(_main(sys.argv[1:]))
