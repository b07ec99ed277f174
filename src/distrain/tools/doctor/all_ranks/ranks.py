"""The all-ranks doctor: every rank checks in, and the ranks are compared and exercised.

Order of events (each step bounded by ``--timeout``, so a missing rank is named, not waited for):

1. every rank runs the local checks and writes its fingerprint (versions, build, host) to the
   job's c10d store; rank 0 waits for all of them and names the ranks that never checked in;
2. a gloo process group (plus an NCCL group on GPUs) is formed and a
   ``torch.distributed.monitored_barrier`` names any rank that does not reach it;
3. fingerprints are compared (the odd rank and its host are named), a real all-reduce of random
   data is verified against the sum each rank recomputes, latency and bandwidth are measured, and
   a fixed piece of local work is timed on every rank to name a straggler;
4. with two or more nodes, every link between nodes is measured and judged (:mod:`.links`).

The test-suite injects faults (a stalled rank, a fake version, a slow rank) from outside, by
wrapping these functions (tests/inject/); nothing here reads test-only settings.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import statistics
import sys
import time
from typing import Any, NoReturn

from distrain import __version__
from distrain.net import host_address, route_to
from distrain.tools.doctor.all_ranks.links import (
    DEFAULT_PARAMS,
    DEFAULT_STEP_S,
    leaders,
    measure_links,
    verdict,
)
from distrain.tools.doctor.all_ranks.rank_checks import (
    ALLREDUCE_ELEMENTS,
    GROUP,
    compare_fingerprints,
    measurement_checks,
)
from distrain.tools.doctor.check import Check, worst
from distrain.tools.doctor.machine.local import Options, run_checks
from distrain.tools.doctor.machine.torch_build import build_info
from distrain.tools.doctor.report import document, print_json, print_table


def fingerprint(rank: int) -> dict[str, Any]:
    """What must match across ranks, plus where this rank runs."""
    info = build_info()
    try:
        import numpy

        numpy_version: str | None = numpy.__version__
    except ImportError:
        numpy_version = None
    fp = {k: info.get(k) for k in ("python", "torch", "torch_git", "cuda", "cudnn", "nccl")}
    fp.update(distrain=__version__, numpy=numpy_version)
    return {"rank": rank, "hostname": socket.gethostname(), "pid": os.getpid(), "fingerprint": fp}


def _wait_checkins(
    store: Any, world: int, timeout: float
) -> tuple[list[dict[str, Any]], list[int]]:
    """Poll the store until every rank's check-in is there or `timeout` passes."""
    deadline = time.monotonic() + timeout
    missing = list(range(world))
    while missing and time.monotonic() < deadline:
        missing = [r for r in missing if not store.check([f"doctor/checkin/{r}"])]
        if missing:
            time.sleep(0.1)
    arrived = [
        json.loads(store.get(f"doctor/checkin/{r}")) for r in range(world) if r not in missing
    ]
    return arrived, missing


def _work_seconds() -> float:
    """Wall time of a fixed local computation (the same on every rank)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen)
    start = time.perf_counter()
    for _ in range(30):
        a = torch.tanh(a @ a * 0.01)
    return time.perf_counter() - start


def _verify_allreduce(rank: int, world: int, device: Any, group: Any) -> bool:
    """All-reduce seeded random data; each rank recomputes the exact sum and compares."""
    import torch
    import torch.distributed as dist

    def data(r: int) -> Any:
        return torch.randn(
            ALLREDUCE_ELEMENTS,
            generator=torch.Generator().manual_seed(1234 + r),
            dtype=torch.float32,
        )

    tensor = data(rank).to(device)
    dist.all_reduce(tensor, group=group)
    expected = torch.stack([data(r).double() for r in range(world)]).sum(0)
    return bool(torch.allclose(tensor.cpu().double(), expected, rtol=1e-5, atol=1e-5 * world))


def _latency_us(device: Any, group: Any, iters: int = 50) -> float:
    """Median time of a one-element all-reduce, in microseconds."""
    import torch
    import torch.distributed as dist

    t = torch.ones(1, device=device)
    for _ in range(5):
        dist.all_reduce(t, group=group)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        dist.all_reduce(t, group=group)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _exit_now(code: int) -> NoReturn:
    """Leave without tearing down a process group a missing peer may block (gloo can hang there)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _missing_from(err: BaseException) -> list[int]:
    match = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", str(err))
    return [int(x) for x in re.findall(r"\d+", match.group(1))] if match else []


def _report(checks: list[Check], start: float, ranks_doc: dict[str, Any], as_json: bool) -> int:
    doc = document(checks, time.perf_counter() - start, mode="all-ranks", ranks=ranks_doc)
    if as_json:
        print_json(doc)
    else:
        print_table(doc)
    return 1 if worst(checks) == "fail" else 0


def node_identity(env: Any) -> dict[str, Any]:
    """Which node this rank is on: node rank, local rank, the address it reaches the master from."""
    try:
        address = route_to(env.master_addr())[0]
    except OSError:
        address = host_address()
    return {"node_rank": env.node_rank(), "local_rank": env.local_rank(), "address": address}


def _check_in_record(env: Any, local: list[Check]) -> dict[str, Any]:
    """What this rank posts: its fingerprint, its node, and how its local checks went."""
    me = fingerprint(env.rank())
    me["node"] = node_identity(env)
    me["local"] = {
        "status": worst(local),
        "problems": [f"{c.id}: {c.seen}" for c in local if c.status == "fail"],
    }
    return me


def _job_store(env: Any, bound: dt.timedelta, timeout: float) -> Any:
    """The job's c10d store, or this rank exits 1 saying it cannot reach it."""
    from distrain.settings import Settings
    from distrain.worker.start.store import restart_safe_store

    try:
        store, _ = restart_safe_store(env, bound, Settings.read())
    except Exception as err:
        print(
            f"distrain doctor: rank {env.rank()}: cannot reach the job's store at "
            f"{env.master_addr()}:{env.master_port()} "
            f"within {timeout:g} s ({type(err).__name__})",
            file=sys.stderr,
        )
        _exit_now(1)
    return store


def _form_groups(env: Any, store: Any, bound: dt.timedelta) -> tuple[Any, Any]:
    """(this rank's device, the NCCL data group or None): gloo always, NCCL with a GPU per rank."""
    import torch
    import torch.distributed as dist

    # one GPU per local rank or none: two ranks on one GPU would make NCCL fail, so use gloo/CPU
    # then
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= env.local_world_size()
    device = torch.device("cuda", env.local_rank()) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    # gloo for the monitored barrier (only gloo has one); NCCL, when there are GPUs, for the data
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore("doctor/pg", store),
        rank=env.rank(),
        world_size=env.world_size(),
        timeout=bound,
    )
    return device, dist.new_group(backend="nccl") if use_cuda else None


def _never_checked_in(
    missing: list[int], arrived: list[dict[str, Any]], world: int, hosts: list[str], timeout: float
) -> Check:
    """The failed check-in: who never came, out of how many, from which hosts the others did."""
    return Check(
        "ranks.checkin",
        GROUP,
        "check-in",
        "fail",
        f"rank(s) {', '.join(map(str, missing))} never checked in within {timeout:g} s "
        f"({len(arrived)}/{world} arrived from {', '.join(hosts)})",
        "Look at that rank's log/node: crashed at start, wrong --master-addr, or a firewall.",
        {"missing": missing},
    )


def _barrier_missed(late: list[int], err: Exception, timeout: float) -> Check:
    """The failed monitored barrier: the ranks that did not reach it."""
    return Check(
        "ranks.barrier",
        GROUP,
        "barrier",
        "fail",
        f"rank(s) {', '.join(map(str, late)) or '?'} did not reach the barrier "
        f"within {timeout:g} s",
        "That rank is stuck or dead: check its log, node and GPU (py-spy dump --pid shows where).",
        {"missing": late, "error": str(err).splitlines()[0]},
    )


def _local_failures(arrived: list[dict[str, Any]], world: int) -> Check:
    """Each rank's local checks: the ranks whose own machine failed one."""
    bad_local = [e for e in arrived if e["local"]["status"] == "fail"]
    return Check(
        "ranks.local",
        GROUP,
        "local checks",
        "fail" if bad_local else "ok",
        "; ".join(
            f"rank {e['rank']} on {e['hostname']}: {', '.join(e['local']['problems'])}"
            for e in bad_local
        )
        or f"no local failures on any of {world} ranks",
        "Run distrain doctor on that node to see the fix." if bad_local else None,
        {"failed_ranks": [e["rank"] for e in bad_local]},
    )


def _passed(check_id: str, name: str, seen: str) -> Check:
    """A rank-wide step every rank passed (nobody missing)."""
    return Check(check_id, GROUP, name, "ok", seen, None, {"missing": []})


def _measure(
    rank: int, world: int, device: Any, data_group: Any, bandwidth_bytes: int
) -> tuple[list[Any], Any]:
    """(every rank's all-reduce check, latency and timed work; this rank's bandwidth row)."""
    import torch
    import torch.distributed as dist

    from distrain.tools.bench.comm import measure

    ok = _verify_allreduce(rank, world, device, data_group)
    latency = _latency_us(device, data_group)
    row = measure(
        "all_reduce", bandwidth_bytes, 2, 5, device, torch.float32, check=False, group=data_group
    )
    work = _work_seconds()
    per_rank: list[Any] = [None] * world
    dist.all_gather_object(
        per_rank, {"rank": rank, "allreduce_ok": ok, "latency_us": latency, "work_s": work}
    )
    return per_rank, row


def run_all_ranks(
    opts: Options,
    timeout: float,
    bandwidth_bytes: int,
    as_json: bool,
    start: float,
    model_params: int = DEFAULT_PARAMS,
    step_s: float = DEFAULT_STEP_S,
) -> int:
    """Run the all-ranks doctor on this rank; rank 0 prints the report and returns its exit code.

    `model_params` and `step_s` describe the user's training for the link verdict (:mod:`.links`).
    """
    import torch.distributed as dist

    from distrain.cluster import detect_environment

    env = detect_environment()
    rank, world = env.rank(), env.world_size()
    bound = dt.timedelta(seconds=timeout)
    local = run_checks(opts)
    me = _check_in_record(env, local)
    ranks_doc: dict[str, Any] = {
        "world_size": world,
        "timeout_s": timeout,
        "ranks": [],
        "measurements": {},
    }
    checks: list[Check] = []
    store = _job_store(env, bound, timeout)
    store.set(f"doctor/checkin/{rank}", json.dumps(me))
    arrived, missing = _wait_checkins(store, world, timeout)
    ranks_doc["ranks"] = arrived
    hosts = sorted({e["hostname"] for e in arrived})
    if missing:
        if rank == 0:
            checks = local + [_never_checked_in(missing, arrived, world, hosts, timeout)]
            _exit_now(_report(checks, start, ranks_doc, as_json))
        print(
            f"distrain doctor: rank {rank}: rank(s) {', '.join(map(str, missing))} never checked "
            f"in within {timeout:g} s",
            file=sys.stderr,
            flush=True,
        )
        _exit_now(1)
    checks.append(
        _passed("ranks.checkin", "check-in", f"{world}/{world} ranks on {', '.join(hosts)}")
    )
    device, data_group = _form_groups(env, store, bound)
    ranks_doc["backend"] = "nccl" if data_group is not None else "gloo"
    try:
        dist.monitored_barrier(timeout=bound, wait_all_ranks=True)
    except RuntimeError as err:
        if rank == 0:
            late = _missing_from(err)
            checks.append(_barrier_missed(late, err, timeout))
            _exit_now(_report(local + checks, start, ranks_doc, as_json))
        print(
            f"distrain doctor: rank {rank}: monitored barrier failed "
            f"({str(err).splitlines()[0][:200]})",
            file=sys.stderr,
            flush=True,
        )
        _exit_now(1)
    checks.append(
        _passed("ranks.barrier", "barrier", f"all {world} ranks passed a monitored barrier")
    )

    checks += [compare_fingerprints(arrived), _local_failures(arrived, world)]
    per_rank, row = _measure(rank, world, device, data_group, bandwidth_bytes)
    links = measure_links(rank, arrived)
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return 0

    checks.extend(measurement_checks(per_rank, arrived, row))
    checks.append(verdict(links, leaders(arrived), model_params, step_s))
    ranks_doc["measurements"] = {"per_rank": per_rank, "links": links}
    return _report(local + checks, start, ranks_doc, as_json)
