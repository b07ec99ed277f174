"""`distrain run --replicas`: the launcher's view of its replica groups, one line per event.

Workers and agents report ``replica`` events (distrain/events/) in the stream of the groups'
shared folder (DISTRAIN_FT_EVENTS): "lost" (a group's agent saw a worker die), "joined" (a
worker passed its first quorum, healed from a peer or not), "final" (a process's last step
and state digest), "done_before" (a replacement whose group's run was over: it ends at once,
worker/replicas/rejoin.py) and "refused" (a process nothing joins to the groups: said once, and the
job stops).  :class:`ReplicaJob` reads them with the one reader
(:func:`distrain.events.read_events`) and turns them into one line each on stderr (and one JSON
line each in the run directory, for `distrain top`); a lost group's step comes from its state
file (coordination/replica_marks.py, the groups' coordination), written at every committed step,
whether the script calls ``ctx.step(opt)`` or ``opt.step()``.  Across nodes each node's
launcher reports the groups it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from distrain.contract import FT_EVENTS, REPLICA_GROUP
from distrain.coordination.replica_marks import mark_ft_end, mark_ft_start, read_group
from distrain.events import REPLICA_EVENTS_FILE, emit, read_events, stream

PROG = "distrain run"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class AgentLossReporter(logging.Filter):
    """In a group's `distrain run`: the agent's "failed (exitcode …)" record → a "lost" event."""

    def __init__(self, folder: str, group: int) -> None:
        super().__init__()
        self.folder, self.group = folder, group

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            str(record.msg).startswith("failed (exitcode")
            and isinstance(record.args, tuple)
            and len(record.args) >= 3
        ):
            code, local_rank, pid = record.args[:3]
            try:
                emit(
                    "replica",
                    self.folder,
                    event="lost",
                    group=self.group,
                    rank=int(str(local_rank)),
                    pid=int(str(pid)),
                    exitcode=int(str(code)),
                )
            except (OSError, ValueError, TypeError):
                pass  # a report, never a reason to disturb the agent
        return True


def report_losses_from_agent() -> None:
    """Under --replicas (the environment says so), report each dead worker of this group's agent."""
    folder, group = os.environ.get(FT_EVENTS), os.environ.get(REPLICA_GROUP)
    if folder and group is not None and group.isdigit():
        # first: distrain's known-noise filter after it drops the record (distrain/noise.py)
        logging.getLogger("torch.distributed.elastic.multiprocessing.api").filters.insert(
            0, AgentLossReporter(folder, int(group))
        )


def _launcher_end(code: int) -> str:
    return f"killed by {_signal_name(code)}" if code < 0 else f"stopped, exit code {code}"


def launcher_died(code: int | None) -> bool:
    """Whether a group launcher's exit `code` is its own death, not its group's verdict: killed by
    a signal, or stopped by one this launcher did not send (it sends its own only once the groups
    are watched no more).  A group whose workers failed past their restarts exits with their
    cause (1, or 137 for a SIGKILL); only workers that were all SIGTERMed past their restarts
    (143) read as the launcher's stop, and are restarted within the same budget."""
    stopped = {128 + signal.SIGTERM, 128 + signal.SIGHUP}  # cli: "stopped by SIGTERM" → 143
    return code is not None and (code < 0 or code in stopped)


@dataclass
class ReplicaJob:
    """What the launcher knows of the groups while they run (`local`: those on this node)."""

    groups: int
    folder: str
    local: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    lost: set[int] = field(default_factory=set)
    finished: dict[int, int] = field(default_factory=dict)
    offset: int = 0  # bytes of the events file already read
    run_dir: str | None = None  # --run-dir: events also go to run_dir/replicas.jsonl (distrain top)
    #: why a worker refused to train (not joined to the replica API): the job stops on it
    refused: str | None = None

    def say(self, text: str, event: str | None = None, **fields: object) -> None:
        """One line on stderr; with an `event` name also one JSON line in the run directory."""
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)
        if event and self.run_dir:
            # the stream's form (a "replica" event), read by the one reader (`distrain top`)
            record = {
                "kind": "replica",
                "t": round(time.time(), 3),
                "event": event,
                **fields,
                "text": text,
            }
            with contextlib.suppress(OSError):  # a full or vanished disk must not stop the job
                os.makedirs(self.run_dir, exist_ok=True)
                with open(os.path.join(self.run_dir, REPLICA_EVENTS_FILE), "a") as f:
                    f.write(json.dumps(record) + "\n")

    def step_of(self, group: int) -> str:
        return read_group(self.folder, group).step or "0"

    def __post_init__(self) -> None:
        self.local = self.local or list(range(self.groups))

    def continuing(self) -> int:
        """Groups still training, as far as this node knows (another node's groups count as live)"""
        return sum(1 for g in range(self.groups) if g not in self.lost and g not in self.finished)

    def read_events(self) -> None:
        """Turn the replica events written since the last call into lines."""
        events, self.offset = read_events(stream(self.folder), self.offset, "replica")
        for ev in events:
            try:
                self.on_event(ev)
            except (ValueError, KeyError, TypeError):
                continue

    def on_event(self, ev: dict[str, object]) -> None:
        group = int(str(ev["group"]))
        if ev["event"] == "refused":
            if self.refused is None:  # every process of every group refuses alike: said once
                self.refused = str(ev["reason"])
                self.say(f"error: {self.refused}", "refused", group=group)
        elif self.refused is not None:
            return  # the job is stopping on the refusal: its workers' exits are no news
        elif ev["event"] == "lost":
            code = int(str(ev["exitcode"]))
            how = _signal_name(code) if code < 0 else f"exit code {code}"
            self.lost.add(group)
            step = self.step_of(group)
            self.say(
                f"replica group {group} lost at step {step} (rank {ev['rank']}, pid "
                f"{ev['pid']}, {how}); "
                f"{self.continuing()}/{self.groups} groups continue",
                "lost",
                group=group,
                step=int(step) if step.isdigit() else step,
                rank=ev["rank"],
                how=how,
            )
        elif ev["event"] == "joined" and int(str(ev.get("rank", 0))) == 0:
            src, at = ev.get("source"), int(str(ev.get("step", 0)))
            if src is not None and (at > 0 or group in self.lost):
                seconds = float(str(ev["seconds"]))
                self.say(
                    f"replica group {group} healed from group {src} at step {at} "
                    f"in {seconds:.1f} s",
                    "healed",
                    group=group,
                    source=src,
                    step=at,
                    seconds=seconds,
                )
            elif group in self.lost:
                self.say(
                    f"replica group {group} rejoined at step {at} from its own state (no live "
                    "group was at its step or ahead)",
                    "rejoined",
                    group=group,
                    step=at,
                )
            self.lost.discard(group)

        elif ev["event"] == "done_before":
            self.say(
                f"replica group {group}'s replacement ends at once: the group was lost after its "
                f"run was over (each of its processes had reported its final state, at step "
                f"{self.step_of(group)}); nothing is left to train",
                "done_before",
                group=group,
            )
            self.lost.discard(group)

    def on_exit(self, group: int, code: int) -> None:
        """Record that group's end (report a failure); others' first step no longer waits on it."""
        self._ended(group, code)
        if code != 0:
            how = f"killed by {_signal_name(code)}" if code < 0 else f"exit code {code}"
            self.say(
                f"replica group {group} failed ({how}); "
                f"{self.continuing()}/{self.groups} groups continue",
                "failed",
                group=group,
                how=how,
            )

    def _ended(self, group: int, code: int) -> None:
        self.finished[group] = code
        mark_ft_start(self.folder, group)
        mark_ft_end(self.folder, group)  # groups that ended wait no more for it

    def on_launcher_death(self, group: int, pid: int, code: int, attempt: int, budget: int) -> bool:
        """Group `group`'s own launcher died (`code`): say so; True when it is to be restarted
        (restart `attempt` of `budget`), else record the group's end for good."""
        how = _launcher_end(code)
        if attempt > budget:  # the group is gone: its end reaches the others, a failure the job
            text = (
                f"replica group {group} lost for good: its launcher (pid {pid}) was {how} and "
                f"the group's {budget} restart(s) (--max-restarts) are spent"
            )
            self.say(text, "failed", group=group, how=how)
            self._ended(group, code)
            return False
        self.lost.add(group)
        step = self.step_of(group)
        text = (
            f"replica group {group} lost at step {step} (its launcher, pid {pid}, {how}); "
            f"restarting it ({attempt}/{budget}); "
            f"{self.continuing()}/{self.groups} groups continue"
        )
        self.say(text, "lost", group=group, step=int(step) if step.isdigit() else step, how=how)
        return True

    def finals(self) -> dict[int, dict[int, tuple[int, str]]]:
        """{group: {rank: (step, digest)}} reported by the processes of the groups that ended
        with 0 ("final" events; a rank's last one counts, as a restarted process reports again)."""
        reported: dict[int, dict[int, tuple[int, str]]] = {}
        for ev in read_events(stream(self.folder), kind="replica")[0]:
            if ev.get("event") != "final":
                continue
            try:
                group, rank = int(str(ev["group"])), int(str(ev["rank"]))
                reported.setdefault(group, {})[rank] = (int(str(ev["step"])), str(ev["digest"]))
            except (KeyError, TypeError, ValueError):
                continue
        return {
            group: dict(sorted(reported[group].items()))
            for group, code in sorted(self.finished.items())
            if code == 0 and reported.get(group)
        }

    def check_finals(self) -> int:
        """Compare the groups' final steps and states rank by rank: 0 when equal, else 1 and a line.

        A run whose groups end with different models must never pass for a good one.
        """
        finals = self.finals()
        silent = [g for g, code in sorted(self.finished.items()) if code == 0 and g not in finals]
        if silent:  # "equal" must never pass by silence: every group that ended reports its state
            self.say(
                f"error: replica group{'s' if len(silent) > 1 else ''} "
                f"{', '.join(map(str, silent))} ended without reporting a final state (its "
                "processes never reached distrain's end: no distrain.init(), or they ended "
                "outside it), so the groups cannot be checked equal",
            )
            return 1
        if len(finals) < 2:
            return 0
        first = min(finals)
        for group, ranks in finals.items():
            for rank, (step, digest) in ranks.items():
                ref = finals[first].get(rank)
                if ref is None or ref != (step, digest):
                    want = f"step {ref[0]}, state {ref[1][:12]}" if ref else "no such rank"
                    self.say(
                        f"error: replica groups ended with different states: rank {rank} of "
                        f"group {first} at "
                        f"{want}, of group {group} at step {step}, state {digest[:12]}",
                    )
                    return 1
        step, digest = finals[first].get(0) or next(iter(finals[first].values()))
        self.say(
            f"replica groups {', '.join(map(str, finals))} ended at step {step} with equal states "
            f"(rank 0: sha256 {digest[:12]})",
        )
        return 0

    def kill_all(self) -> None:
        """SIGKILL every group's session at once: nothing of a refused job is worth a grace (a
        SIGTERM would have each group's launcher and agent say they were stopped)."""
        import psutil

        for proc in self.procs:
            if proc.poll() is not None:
                continue
            try:  # torch's agent starts fresh-interpreter workers in sessions of their own
                tree = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                tree = []
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            for child in tree:
                with contextlib.suppress(psutil.Error):
                    child.kill()
        for proc in self.procs:
            proc.wait()

    def stop_all(self, grace_s: float = 30) -> None:
        """SIGTERM each group's launcher (its agent passes it on); SIGKILL it after `grace_s`."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the agent passes it on and waits for its workers
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):  # the group's agent and workers too
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
