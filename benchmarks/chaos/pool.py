"""Trials and reference runs `jobs` at a time, in workers forked from the campaign's process.

A trial mostly waits (a 0.1 s step sleep, a rendezvous, a restart's grace, the leftover look's
10 s): one after another, the suite's slice used a quarter of two cores (tests/RESULTS.md).
Each trial has its own name, folders, cgroup and namespaces, so trials run side by side as they
run alone.  The workers are forked before any torch work in the parent; each cleans up what its
task left, also when the parent's Ctrl-C or SIGTERM (terminate: SIGTERM, raised in the worker as
Ctrl-C) ends it.  One job (`jobs=1`) runs everything in the campaign's own process, in order.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import campaign
import membership
import nodes
from campaign import Reference
from kinds import KINDS
from record import Trial, report
from trial_procs import kill_all

#: how a pool maps a task over its argument tuples: results as they finish (in order for one job)
Each = Callable[[Callable[[tuple], Any], Iterable[tuple]], Iterator[Any]]


class Failed(Exception):
    """A task ended by SystemExit (a failed reference run): said in the parent, not a lost
    worker (a pool's worker that exits takes its task with it, and the pool waits for good)."""


def cleanup() -> None:
    """Kill what this process's trials left and delete their cgroups and namespaces."""
    for trial in campaign.CURRENT:
        kill_all(trial)
    membership.remove_all()
    nodes.delete_all()


def call(args: tuple) -> Any:
    """`args[0](*args[1:])`, everything it made gone after it; a SystemExit raised as Failed."""
    try:
        return args[0](*args[1:])
    except SystemExit as err:
        raise Failed(str(err)) from None
    finally:
        cleanup()


@contextmanager
def forked(jobs: int) -> Iterator[Each]:
    """A way to run tasks `jobs` at a time (imap_unordered of a forked pool; map for one job);
    the workers end once every task is done, or are terminated on an error or a signal."""
    if jobs <= 1:
        yield map
        return
    sys.stdout.flush()  # a worker's copy of the buffer would print it again
    pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        yield pool.imap_unordered
        pool.close()  # every task done: the workers end once idle
        pool.join()
    finally:
        pool.terminate()  # no-op after a join; else SIGTERM, a Ctrl-C in the workers
        pool.join()


def _reference(kind: str, work: Path, n: int) -> tuple[str, int, Reference]:
    return kind, n, campaign.reference(KINDS[kind], work, n)


def references(kinds: list[str], work: Path, runs: int, each: Each) -> dict[str, Reference]:
    """Each kind's `runs` uninterrupted runs, side by side (`campaign.pair` of them), each said."""
    got: dict[str, dict[int, Reference]] = {}
    tasks = [(_reference, kind, work, n) for kind in kinds for n in range(1, runs + 1)]
    for kind, n, ref in each(call, tasks):
        got.setdefault(kind, {})[n] = ref
    ordered = {kind: [got[kind][n] for n in sorted(got[kind])] for kind in kinds}
    refs = {kind: campaign.pair(KINDS[kind], done) for kind, done in ordered.items()}
    for kind, ref in refs.items():
        print(f"reference {kind}: {' and '.join(f'{x:.1f}' for x in ref.totals)} s", flush=True)
    return refs


def run_all(drawn: list[Trial], seed: int, work: Path, args: argparse.Namespace) -> list[Trial]:
    """The drawn trials to their verdicts, each reported as it ends. One job: in order, each
    kind's reference run just before its first trial (as the campaign always ran); more: every
    kind's reference first, side by side, then the trials `args.jobs` at a time."""
    jobs, done = args.jobs or 1, []
    for kind in dict.fromkeys(t.kind for t in drawn):
        KINDS[kind].prepare(work)
    try:
        with forked(jobs) as each:
            if jobs > 1:
                kinds = list(dict.fromkeys(t.kind for t in drawn))
                refs = references(kinds, work, args.reference_runs, each)
                tasks = [(campaign.run_trial, t, seed, work, refs[t.kind]) for t in drawn]
                for t in each(call, tasks):
                    done.append(t)
                    report(t, seed, args, campaign.COMMIT)
                return sorted(done, key=lambda t: t.index)
            refs = {}
            for t in drawn:
                if t.kind not in refs:
                    refs.update(references([t.kind], work, args.reference_runs, each))
                done.append(campaign.run_trial(t, seed, work, refs[t.kind]))
                report(t, seed, args, campaign.COMMIT)
            return done
    except Failed as err:
        raise SystemExit(str(err)) from None
