"""Chaos campaign: random faults on every job kind, each trial judged by one oracle.

    python3 benchmarks/chaos/campaign.py --trials 20 --seed 1 --jobs 3   # 3 trials at a time
    python3 benchmarks/chaos/campaign.py --trials 8 --seed 1 --kinds digits,fsdp --faults kill_rank
    python3 benchmarks/chaos/campaign.py --seed 1 --only 7          # replay trial 7 of seed 1
    python3 benchmarks/chaos/campaign.py --trials 40 --seed 3 --record   # + chaos/RESULTS.md
    python3 benchmarks/chaos/campaign.py --trials 30 --seed 17 \
        --tsv benchmarks/chaos/trials/seed17.tsv \
        --work /var/tmp/chaos17    # keep every trial's logs (and a hung trial's stacks) there

Each trial draws, from its own seed (`SEED:INDEX`, so any trial replays alone), a job kind
(kinds.py), a fault that applies to it (faults.py) and a moment: a fraction of the uninterrupted
run's time after its first checkpoint. The job runs under `distrain run`; when the fault is one a
user answers by running the command again (a killed or preempted launcher, a corrupt checkpoint,
a full disk once freed, a dead lighthouse), the trial runs it again. The oracle (oracle.py)
judges the trial: healed or stopped with its cause; never hung, diverged, leaking a process,
losing a good checkpoint, or silent. The table counts kind × fault; the exit code is 1 when any
trial broke the oracle. A trial that passes its bound gets a py-spy dump of every live process
(`tN-R.stacks` beside its logs) before it is killed. Two-node kinds run in network namespaces
made for the trial (nodes.py); they and every process of the trial are gone when the campaign
ends, also by a crash, SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import typing
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bounds  # noqa: E402
import membership  # noqa: E402
import nodes  # noqa: E402
import oracle  # noqa: E402
from bounds import RERUN_S, SELF_TIMED  # noqa: E402
from faults import FAULTS, WATCHED, FaultContext, Missed, Shot  # noqa: E402
from job_progress import progress, training_span, wait_ready  # noqa: E402
from kinds import KINDS, REPO, Job, Kind  # noqa: E402
from membership import TRIAL_VAR, follow  # noqa: E402
from oracle import RunRecord, Verdict, judge, newest_valid_step  # noqa: E402
from record import Trial, load_trials, tables  # noqa: E402
from recovery import ENV, cost  # noqa: E402
from trial_procs import dump_stacks, kill_all, leftovers  # noqa: E402

if typing.TYPE_CHECKING:
    from helpers.netns_hosts import Hosts

PY = sys.executable
#: the checkout's commit, recorded with every trial (a trial replays against the same code)
COMMIT = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                        capture_output=True,
                        text=True, check=False).stdout.strip() or "unknown"  # fmt: skip
WATCHDOG_S = 8
#: the distrain the trials' jobs run (the self-check points it at a broken copy's, one at a time)
SRC = REPO / "src"
#: in every trial's name: one campaign's trials apart from another's (the self-check: per break)
TAG = str(os.getpid())


#: the trial running now (the campaign kills its processes when it ends by a crash or a signal)
CURRENT: list[str] = []


@dataclass
class Reference:
    """A kind's uninterrupted run: its result, how long it trains after its first checkpoint,
    and the step of its last checkpoint (faults are placed by training progress, not by time:
    the same moment in seconds falls elsewhere when the machine's load changes)."""

    result: dict[str, str] | None
    total: float
    span: float
    last_step: int
    #: every uninterrupted run's seconds (the reference is run twice; `total` is the slower)
    totals: tuple[float, ...] = ()


def _env(trial: str, job: Job, node: int = 0) -> dict[str, str]:
    path = [str(SRC), str(REPO / "tests" / "scripts")]
    path += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**job.env, **(job.node_env[node] if job.node_env else {})}  # a node's memory root
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), TRIAL_VAR: trial, **ENV, **env}


def _node_logs(logs: Path, i: int) -> Path:
    return logs.with_name(f"{logs.name}-n{i}")


def start(job: Job, trial: str, logs: Path, made: Hosts | None = None) -> list[subprocess.Popen]:
    """Start the job's command in its own session, output to files (no pipe to fill); on a
    two-node kind one launcher per node, inside its namespace (logs `…-nI.out/.err`)."""
    job.out.mkdir(parents=True, exist_ok=True)
    if made is not None:
        procs = [made.start(i, membership.wrap(trial, [PY, *argv]),
                            _node_logs(logs, i).with_suffix(".out"), _env(trial, job, i),
                            err_log=_node_logs(logs, i).with_suffix(".err"))
                 for i, argv in enumerate(job.nodes)]  # fmt: skip
    else:
        out = open(logs.with_suffix(".out"), "wb")  # noqa: SIM115 - the child holds it
        err = open(logs.with_suffix(".err"), "wb")  # noqa: SIM115
        argv = membership.wrap(trial, [PY, *job.argv])
        procs = [
            subprocess.Popen(
                argv, env=_env(trial, job), stdout=out, stderr=err, start_new_session=True
            )
        ]
        out.close()
        err.close()
    for proc in procs:
        follow(trial, proc.pid)
    return procs


def finish(procs: list[subprocess.Popen], trial: str, logs: Path, bound: float, t0: float,
           made: Hosts | None = None, lost: set[int] | None = None,
           elastic: bool = False) -> RunRecord:  # fmt: skip
    """Wait for the run until `bound` seconds after t0; past it, dump the stacks of and kill
    every process of the trial (hung). Two nodes: exit 0 when every node not taken away by the
    fault (`lost`) exited 0, an elastic job when one node finished and the others ended;
    otherwise the exit and output of the first node that failed."""
    rcs: list[int | None] = []
    for proc in procs:
        try:
            rcs.append(proc.wait(timeout=max(1.0, t0 + bound - time.monotonic())))
        except subprocess.TimeoutExpired:
            rcs.append(None)
    if None in rcs:
        dump_stacks(trial, logs.with_suffix(".stacks"), made)
        kill_all(trial, made)
        for proc in procs:
            proc.wait()
    read = lambda path: path.read_text(errors="replace") if path.exists() else ""  # noqa: E731
    if made is None:
        return RunRecord(
            rcs[0],
            time.monotonic() - t0,
            read(logs.with_suffix(".out")),
            read(logs.with_suffix(".err")),
        )
    texts = [(read(_node_logs(logs, i).with_suffix(".out")),
              read(_node_logs(logs, i).with_suffix(".err")))
             for i in range(len(procs))]  # fmt: skip
    kept = [i for i in range(len(procs)) if i not in (lost or set())] or list(range(len(procs)))
    if None in rcs:
        rc, pick = None, rcs.index(None)
    elif elastic and 0 in rcs:
        rc, pick = 0, rcs.index(0)
    elif all(rcs[i] == 0 for i in kept):
        rc, pick = 0, kept[0]
    else:
        pick = next(i for i in kept if rcs[i] != 0)
        rc = rcs[pick]
    return RunRecord(
        rc, time.monotonic() - t0, "\n".join(t[0] + t[1] for t in texts), texts[pick][1], rcs=rcs
    )


def reference(kind: Kind, work: Path, n: int = 1) -> Reference:
    """Run the kind once without a fault: its result (restart kinds) and its timing."""
    with nodes.machines(kind.nodes) if kind.nodes > 1 else nullcontext() as made:
        name = f"ref{n}-{kind.name}"  # each run its own folders: the second must not resume
        job = kind.job(work, name, addrs=made.addrs if made else None)
        trial, logs = f"{name}-{TAG}", work / name
        CURRENT[:] = [trial]
        t0 = time.monotonic()
        procs = start(job, trial, logs, made)
        wait_ready(procs, job, t0 + 600)
        t_ready = time.time()  # the wall clock of the files training_span reads
        run = finish(procs, trial, logs, 600, t0, made)
        span = training_span(job, t_ready, time.time())
        leftovers(trial, made=made)
        membership.remove(trial)
    if run.rc != 0 or oracle.memory_left(job):  # the memory tier leaves nothing after a good end
        raise SystemExit(f"the uninterrupted {kind.name} run failed (exit {run.rc}): "
                         f"{run.last_line()}; memory left: {oracle.memory_left(job)}")  # fmt: skip
    result = None if kind.replicas else kind.result(job)
    return Reference(result, run.seconds, span, progress(job))


def twice(kind: Kind, work: Path, runs: int = 2) -> Reference:
    """The reference run twice, one after the other (`runs=1`, the self-check, whose trials need
    a verdict, not a bound's spread: once); `pair` of them."""
    first = reference(kind, work, 1)
    return pair(kind, [first, reference(kind, work, 2)] if runs > 1 else [first])


def pair(kind: Kind, done: list[Reference]) -> Reference:
    """A kind's reference from its uninterrupted runs: the same result each time (else the kind
    is not deterministic and no trial of it can be judged bit for bit), the slower run's timing,
    every total kept."""
    first, second = done[0], done[-1]
    if first.result != second.result:  # said, not fatal: the trials' diverged verdicts tell
        differ = sorted(
            k for k in first.result or {} if (second.result or {}).get(k) != first.result[k]
        )
        print(
            f"reference {kind.name}: the two uninterrupted runs differ in {differ[:4]}", flush=True
        )
    slow = max(done, key=lambda r: r.total)
    slow.totals = tuple(r.total for r in done)
    return slow


def draw(seed: int, index: int, kinds: list[str], faults: list[str]) -> Trial:
    """The trial's kind, fault and moment, from its own seed."""
    rng = random.Random(f"{seed}:{index}")
    kind = rng.choice(kinds)
    applicable = [f for f in faults if FAULTS[f][1](KINDS[kind])] or ["kill_rank"]
    return Trial(index, kind, rng.choice(applicable), rng.uniform(0.05, 0.9))


def run_trial(t: Trial, seed: int, work: Path, ref: Reference) -> Trial:
    """Run one drawn trial to its verdict (a two-node kind inside namespaces made for it)."""
    kind, trial = KINDS[t.kind], f"{seed}-{t.index}-{TAG}"
    with nodes.machines(kind.nodes) if kind.nodes > 1 else nullcontext() as made:
        try:
            return _run_trial(t, seed, work, ref, made)
        finally:  # a signal mid-trial too: its processes killed while its cgroup still lists them
            kill_all(trial)
            membership.remove(trial)


def _run_trial(t: Trial, seed: int, work: Path, ref: Reference, made: Hosts | None) -> Trial:
    kind, rng = KINDS[t.kind], random.Random(f"{seed}:{t.index}:fault")
    watchdog = WATCHDOG_S if t.fault in WATCHED else 0
    trial = f"{seed}-{t.index}-{TAG}"
    job = kind.job(work, f"t{t.index}", watchdog, addrs=made.addrs if made else None)
    CURRENT[:] = [trial]
    mounted = _mount_tmpfs({"disk_full": job.ckpt, "memory_full": job.memory}.get(t.fault))
    bound = bounds.bound(t.fault, ref.total, watchdog)
    t0 = time.monotonic()
    logs = work / f"t{t.index}-1"
    procs = start(job, trial, logs, made)
    shot, good, lost, fault_t = Shot("(none)"), None, set(), None
    try:
        at_step = round(t.moment * ref.last_step)
        if wait_ready(procs, job, t0 + bound, at_step):
            # by progress where the job has checkpoints, at once for a fault that catches its
            # own moment (fault_save.py); the rest of the way in time
            timed = ref.last_step or t.fault in SELF_TIMED
            time.sleep(rng.uniform(0.0, 0.5) if timed else t.moment * ref.span)
            good = newest_valid_step(job.ckpt)
            if all(proc.poll() is None for proc in procs):
                launchers = [psutil.Process(proc.pid) for proc in procs]
                ctx = FaultContext(trial, launchers[0], job, rng, watchdog,
                                   lambda: leftovers(trial, grace=10, made=made),
                                   launchers=launchers, hosts=made, lost=lost,
                                   logs=logs)  # fmt: skip
                at, fault_t = progress(job), time.time()  # the clock of the metrics records
                shot = FAULTS[t.fault][0](ctx)
                shot.what += f" (newest checkpoint: step {at})" if job.ckpt else ""
                if t.fault == "corrupt_newest":
                    good = newest_valid_step(job.ckpt)
            else:
                raise Missed("the run had ended")
        else:
            raise Missed("the run ended before its first checkpoint")
    except Missed as why:
        t.missed, shot = True, Shot(f"missed: {why}")
    except (subprocess.SubprocessError, OSError, psutil.Error) as err:  # the fault's tool failed
        t.missed, shot = True, Shot(f"missed: the fault failed: {type(err).__name__}: {err}")
    t.what = shot.what
    bound += shot.bound_extra
    runs = [finish(procs, trial, logs, bound, t0, made, lost, kind.elastic)]
    left = shot.left + leftovers(trial, made=made)
    if shot.rerun and runs[0].rc not in (0, None):
        if shot.after:
            shot.after()
        logs, bound = work / f"t{t.index}-2", bound + RERUN_S
        runs.append(finish(start(job, trial, logs, made), trial, logs, bound, t0, made,
                           elastic=kind.elastic))  # fmt: skip
        left += leftovers(trial, made=made)
    t.verdict = judge(kind, job, ref.result, runs, left, good, t.fault)
    if t.verdict.word == "stopped":  # a documented stop: the same command run again must heal
        if shot.after and len(runs) == 1:
            shot.after()
        logs, bound = work / f"t{t.index}-{len(runs) + 1}", bound + RERUN_S
        runs.append(finish(start(job, trial, logs, made), trial, logs, bound, t0, made,
                           elastic=kind.elastic))  # fmt: skip
        left += leftovers(trial, made=made)
        first, t.verdict = t.verdict, judge(kind, job, ref.result, runs, left, good, t.fault)
        if t.verdict.word == "stopped":
            t.verdict = Verdict("rerun stopped", f"{first.detail}; again: {t.verdict.detail}")
        elif t.verdict.ok:
            t.verdict.detail = f"stopped ({first.detail[:120]}), then the rerun healed"
    if t.missed and t.verdict.word == "healed":
        t.verdict = Verdict("missed", t.verdict.detail)
    t.seconds, t.cost = time.monotonic() - t0, cost(kind, job, runs, t.missed, fault_t)
    t.verdict = oracle.lost_steps_verdict(t.verdict, job, t.fault, t.cost.lost_steps)
    if mounted:
        subprocess.run(["umount", "-l", str(mounted)], check=False)
    return t


def _mount_tmpfs(folder: Path | None) -> Path | None:
    """`folder` on a 32 MiB tmpfs of its own (root only); None where it can't be, or no folder."""
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(folder)],
                         capture_output=True, check=False)  # fmt: skip
    return folder if res.returncode == 0 else None


def main() -> int:
    """Draw and run the trials; print each, then the table; 1 when any broke the oracle."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seed", type=int, default=None, help="replay a campaign (default: a new seed)")
    p.add_argument("--only", type=int, default=None, help="run trial INDEX of --seed alone")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"of {','.join(KINDS)}")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"of {','.join(FAULTS)}")
    p.add_argument("--json", default=None, help="append one JSON line per trial here")
    p.add_argument("--tsv", default=None, help="append one row per trial (trials/seedN.tsv)")
    p.add_argument(
        "--work", default=None, help="keep the trials' folders (logs, a hung trial's stacks) here"
    )
    p.add_argument(
        "--record", action="store_true", help="append the table to benchmarks/chaos/RESULTS.md"
    )
    p.add_argument("--summarize", nargs="+", default=None, metavar="JSONL",
                   help="print the table of trials recorded with --json "
                   "(several runs add up)")  # fmt: skip
    p.add_argument(
        "--self-check",
        action="store_true",
        help="apply each known break to a scratch copy; every one must be caught",
    )
    p.add_argument("--reference-runs", type=int, default=2, choices=(1, 2),
                   help="uninterrupted runs per kind (2: their spread is printed)")  # fmt: skip
    p.add_argument("--breaks", default=None, help="--self-check: only these, comma-separated")
    p.add_argument("--jobs", type=int, default=None,
                   help="trials (--self-check: cases) run at a time (default 1; 2)")  # fmt: skip
    args = p.parse_args()
    if args.self_check:
        import selfcheck

        return selfcheck.main(args.breaks.split(",") if args.breaks else None, args.jobs or 2)
    if args.summarize:
        print(tables(load_trials(args.summarize)))
        return 0
    kinds, faults = args.kinds.split(","), args.faults.split(",")
    for name in kinds + faults:
        if name not in KINDS and name not in FAULTS:
            p.error(f"unknown kind or fault {name!r}")
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    indexes = [args.only] if args.only is not None else list(range(args.trials))
    drawn = [draw(seed, i, kinds, faults) for i in indexes]
    # imported now, not at the first fault: under load the import took seconds, and a fault
    # placed at a step fell that much later (at the end of a short job)
    import distrain.checkpoint.files  # noqa: F401

    load0 = os.getloadavg()
    # SIGTERM ends the campaign as Ctrl-C does: through the finally below
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    keep = Path(args.work) if args.work else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chaos-", dir=keep) as tmp:
        work = (
            Path(tmp) if keep is None else Path(tempfile.mkdtemp(prefix=f"seed{seed}-", dir=keep))
        )
        try:
            import pool

            done = pool.run_all(drawn, seed, work, args)
        finally:
            for trial in CURRENT:
                kill_all(trial)
            membership.remove_all()
            nodes.delete_all()
    bad = [t for t in done if t.verdict and not t.verdict.ok]
    text = tables(done)
    print(
        f"\nseed {seed}, {len(done)} trials, load {load0[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after\n{text}"
    )
    for t in bad:
        print(f"BROKE THE ORACLE: trial {t.index} ({t.kind}, {t.fault}): replay with "
              f"`python3 benchmarks/chaos/campaign.py --seed {seed} --only {t.index}`")  # fmt: skip
    if args.record:
        from record import record

        record(seed, args, done, text, load0, bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
