"""Fault injection for the test-suite, from outside the shipped package.

A test puts this directory first on ``PYTHONPATH`` (``helpers.faults.fault_env`` in
tests/helpers/faults.py does it), so Python imports this file at start-up in every process of the
job: launcher, agent and workers.  When one of the variables below is set it installs an import hook
that wraps a few functions of distrain's modules as they are first imported; the code under test
runs unchanged and has to detect the fault on its own.

- ``DTEST_FAULT_DOCTOR_VERSION=RANK:VERSION``: the doctor's ``fingerprint`` on that rank reports
  VERSION as its torch version;
- ``DTEST_FAULT_DOCTOR_STALL=RANK:checkin|barrier``: that rank hangs before it checks in
  (inside ``fingerprint``) or before the monitored barrier;
- ``DTEST_FAULT_DOCTOR_SLOW=RANK``: that rank's timed local work (``_work_seconds``) takes 1 s
  longer (a stall, not more computation: on an oversubscribed machine extra computation overlaps
  the other ranks' and need not come out slower);
- ``DTEST_FAULT_BENCH_CORRUPT=RANK``: in ``distrain bench comm``, one element of that rank's
  result is wrong after every collective;
- ``DTEST_FAULT_FT_CONFIGURE=GROUP:RANK:ATTEMPT``: under ``distrain run --replicas``, the first
  reconfiguration of TorchFT's cross-group gloo group fails on that rank of that replica group
  in that attempt (``TORCHELASTIC_RESTART_COUNT``), as a lost connection does ("Failed to recv").
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Callable
from typing import Any

VERSION, STALL, SLOW, CORRUPT = (
    "DTEST_FAULT_DOCTOR_VERSION",
    "DTEST_FAULT_DOCTOR_STALL",
    "DTEST_FAULT_DOCTOR_SLOW",
    "DTEST_FAULT_BENCH_CORRUPT",
)
CONFIGURE = "DTEST_FAULT_FT_CONFIGURE"
#: how long a stalled rank hangs before it gives up (the job normally kills it first)
HANG_S = 120.0


def _target(var: str, rank: int | None = None) -> str | None:
    """The value after 'RANK:' in `var` (or 'yes' for a bare rank) when it names this rank."""
    raw = os.environ.get(var, "")
    who, _, value = raw.partition(":")
    me = rank if rank is not None else int(os.environ.get("RANK", "-1"))
    return (value or "yes") if raw and who.strip() == str(me) else None


def _hang() -> None:
    time.sleep(HANG_S)
    os._exit(3)


def _patch_doctor(ranks: Any) -> None:
    fingerprint, work, run_all = ranks.fingerprint, ranks._work_seconds, ranks.run_all_ranks

    def faulty_fingerprint(rank: int) -> dict[str, Any]:
        if _target(STALL, rank) == "checkin":
            _hang()
        fp = fingerprint(rank)
        fake = _target(VERSION, rank)
        if fake:
            fp["fingerprint"]["torch"] = fake
        return fp

    def slow_work() -> float:
        if not _target(SLOW):
            return work()
        start = time.perf_counter()
        work()
        time.sleep(1.0)
        return time.perf_counter() - start

    def run_all_ranks(*args: Any, **kwargs: Any) -> int:
        if _target(STALL) == "barrier":
            import torch.distributed as dist

            dist.monitored_barrier = lambda *a, **k: _hang()
        return run_all(*args, **kwargs)

    ranks.fingerprint = faulty_fingerprint
    ranks.run_all_ranks = run_all_ranks
    ranks._work_seconds = slow_work


def _patch_bench_comm(comm: Any) -> None:
    collective = comm.collective

    def corrupting(op: str, group: Any = None) -> Callable[[Any], None]:
        import torch.distributed as dist

        run = collective(op, group)
        if not _target(CORRUPT, dist.get_rank()):
            return run

        def run_and_corrupt(bufs: Any) -> None:
            run(bufs)
            bufs.out.view(-1)[0] += 1  # a wrong value arrived here

        return run_and_corrupt

    comm.collective = corrupting


def _patch_ft_configure(process_group: Any) -> None:
    where = (os.environ.get("DISTRAIN_REPLICA_GROUP"), os.environ.get("RANK"),
             os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # fmt: skip
    if tuple(os.environ.get(CONFIGURE, "").split(":")) != where:
        return
    cls = process_group.ProcessGroupGloo
    configure, failed = cls.configure, []

    def failing_configure(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(True)
            raise RuntimeError(
                f"{CONFIGURE}: injected: Failed to recv (group {where[0]}, rank {where[1]})"
            )
        return configure(self, *args, **kwargs)

    cls.configure = failing_configure


PATCHES: dict[str, Callable[[Any], None]] = {
    "distrain.tools.doctor.all_ranks.ranks": _patch_doctor,
    "distrain.tools.bench.comm": _patch_bench_comm,
    "torchft.process_group": _patch_ft_configure,
}


class _Patcher(importlib.abc.MetaPathFinder):
    """Finds the modules in PATCHES as usual, then patches each right after it has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if any(os.environ.get(v) for v in (VERSION, STALL, SLOW, CORRUPT, CONFIGURE)):
    sys.meta_path.insert(0, _Patcher())
