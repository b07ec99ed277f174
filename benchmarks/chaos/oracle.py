"""The chaos campaign's oracle: how a trial ended, judged against what a failure may cost.

A trial ends **healed**: exit 0, bit for bit its uninterrupted run's whole saved state (model,
optimizer, scheduler, step where the kind saves them; a replica kind: every group at the
reference's last step with equal parameters), and, when the job restarted, *resumed* from a
checkpoint at least as new as the newest valid one at the fault (a job that retrains from step 0
ends equal too: only the resume line tells).  Or **stopped**: a non-zero exit within its bound
whose last line is distrain's own, naming the cause, and then the same command run again heals
(campaign.py reruns every stopped trial).  Or **missed**: the fault hit nothing; neither good nor
bad, counted apart.  Anything else breaks the oracle: it hung past its bound, diverged, left a
process behind, lost a good checkpoint, did not resume or resumed from an older checkpoint,
stopped without saying why, or stopped and did not heal when run again.  A per-process batch
kind (``nodes_elastic_batch``) is judged by the samples it trained on instead of a bit-for-bit
result, and a refusal of its own checkpoint in any run breaks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kinds import SAMPLES_OK, Job, Kind, interval, intervals, memory_folders, replica_verdict
from stops import documented

#: a stopped job's last line is distrain's verdict (not, say, a summary printed after it)
CAUSE_WORDS = ("failed", "error", "stopped", "frozen", "not restarted", "ended")
#: verdicts that keep the promise ("missed": the fault hit nothing, counted apart)
GOOD = ("healed", "stopped", "missed")
#: verdicts that break it, in the order they are reported when several apply
BAD = ("hung", "leftovers", "diverged", "not resumed", "lost work", "lost steps",
       "lost checkpoint", "memory left", "undocumented stop", "no cause", "rerun stopped",
       "no result", "refused its own checkpoint")  # fmt: skip
#: what a loader that refuses a checkpoint says (issue 41's defect on a world change)
REFUSED = "cannot resume loader"
#: the checkpointer's line on rank 0 after a resume (checkpoint/checkpointer.py)
RESUMED = re.compile(r"distrain: resumed from \S+.*?\(step (\d+)")
#: the launcher's lines when it restarts the workers or a node rejoins (launch/report/console.py)
#: (a multi-node job's agent restarts only its node's ranks: "restarting this node's ranks";
#: missed before, so seed 4303 trial 1's restart went unchecked)
RESTARTED = re.compile(
    r"restarting every rank|restarting this node's ranks|resuming from step|membership changed"
)


@dataclass
class RunRecord:
    """One start of the job's command within a trial."""

    rc: int | None  # None: killed at its bound (hung)
    seconds: float
    stdout: str  # two nodes: every node's output
    stderr: str  # two nodes: the stderr of the node whose exit is the run's
    rcs: list[int | None] = field(default_factory=list)  # two nodes: each node's exit

    def last_line(self) -> str:
        """The last non-empty line the launcher printed (stderr first: that is where it speaks)."""
        for text in (self.stderr, self.stdout):
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1].strip()
        return ""

    def resumed_steps(self) -> list[int]:
        """The steps this run's ranks resumed from, in the order the lines came."""
        return [int(m.group(1)) for m in RESUMED.finditer(self.stdout + "\n" + self.stderr)]

    def restarted(self) -> bool:
        """Whether the launcher restarted the workers during this run."""
        return bool(RESTARTED.search(self.stdout + "\n" + self.stderr))


@dataclass
class Verdict:
    """The oracle's answer: one word, and the detail that explains it."""

    word: str
    detail: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the trial kept the promise."""
        return self.word in GOOD


def newest_valid_step(ckpt: Path | None) -> int | None:
    """The step of the newest checkpoint under `ckpt` that verifies (every file's sha256)."""
    if ckpt is None:
        return None
    from distrain.checkpoint.files import step_dirs, verify

    return next((step for step, path in step_dirs(str(ckpt)) if verify(path) is None), None)


def judge(
    kind: Kind,
    job: Job,
    reference: dict[str, str] | None,
    runs: list[RunRecord],
    leftovers: list[str],
    good_step_before: int | None,
    fault: str | None = None,
) -> Verdict:
    """The verdict of one trial from its runs, the processes it left and its checkpoints; with
    `fault`, every run that exited non-zero must have ended in one of the fault's documented
    stops (stops.py)."""
    problems = []
    odd = _undocumented(fault, kind, runs)
    if any(r.rc is None for r in runs):
        problems.append("hung")
    if leftovers:
        problems.append("leftovers")
    after = newest_valid_step(job.ckpt)
    if good_step_before is not None and (after is None or after < good_step_before):
        problems.append("lost checkpoint")
    last = runs[-1]
    word, detail = "", ""
    if last.rc == 0:
        try:
            result = kind.result(job)
        except (OSError, RuntimeError, KeyError, ValueError) as err:
            problems.append("no result")
            detail = f"{type(err).__name__}: {err}"
        else:
            why = (
                replica_verdict(result, _expected_step(job))
                if kind.replicas
                else _restart_verdict(reference, result)
            )
            if kind.samples:  # judged by what it trained on, whatever world sizes it had
                why = None if result["samples"] == SAMPLES_OK else result["samples"]
            elif why and kind.elastic and (went_on := _went_on(reference, result, runs)):
                why, detail = None, went_on
            if why:
                problems.append("diverged")
                detail = why
            else:
                word = "healed"
                resume, detail = resume_verdict(kind, job, runs, good_step_before)
                if resume:
                    problems.append(resume)
                said = [ln for r in runs for ln in r.stdout.splitlines() if "at sample" in ln]
                if kind.samples and said:  # the loader's line: where it went on, which batch
                    detail = f"{detail}; {said[-1].strip()[:160]}"
    elif last.rc is not None:
        line = last.last_line()
        if fault is not None and odd and odd[-1][0] == len(runs) - 1:
            word, detail = "stopped", line  # reported below as undocumented
        elif line.startswith("distrain") and any(w in line for w in CAUSE_WORDS):
            word, detail = "stopped", line
        else:
            problems.append("no cause")
            detail = line or "(nothing printed)"
    refused = [ln for r in runs for ln in (r.stdout + r.stderr).splitlines() if REFUSED in ln]
    if kind.samples and refused:  # issue 41: a world change refused, in any run of the trial
        problems.append("refused its own checkpoint")
        detail = refused[0].strip()[:200]
    if odd:
        problems.append("undocumented stop")
        said = "; ".join(f"run {i + 1} exit {rc}: {line[:100] or '(nothing printed)'}"
                         for i, rc, line in odd)  # fmt: skip
        detail = f"not a documented stop of {fault}: {said}" + (f"; {detail}" if detail else "")
    if any(r.rcs for r in runs):  # two nodes: each run's exit per node
        exits = " then ".join(str(r.rcs) for r in runs)
        detail = (detail + "; " if detail else "") + f"node exits {exits}"
    if leftovers:
        detail = (detail + "; " if detail else "") + "left: " + ", ".join(leftovers)
    if last.rc == 0 and (kept := memory_left(job)):  # the tier's promise after a good end
        problems.append("memory left")
        detail = (detail + "; " if detail else "") + "memory folder holds: " + ", ".join(kept)
    if problems:
        first = next(p for p in BAD if p in problems)
        return Verdict(first, detail, problems)
    return Verdict(word, detail)


def memory_left(job: Job) -> list[str]:
    """The memory tier's folders and files still under the job's memory root, or each node's
    (``distrain-mem-*``: the tier removes its folder after a good end; a fault's own filler beside
    it is not the tier's)."""
    root = job.memory
    return sorted(str(p.relative_to(root)) for d in memory_folders(job)
                  for p in [d, *d.rglob("*")] if root)[:4]  # fmt: skip


def lost_bound(job: Job, fault: str | None) -> int | None:
    """The most steps a fault may cost the job: the finest tier's interval (memory K where the
    kind has one, else the disk's N) plus 1 in flight (a step logged whose save had not ended);
    where the fault destroys the newest checkpoint of a tier on purpose, that tier's interval
    more (the one before it resumes: 2N + 1 on disk alone; a disk checkpoint corrupted at the
    end of a memory kind, whose tier removed its snapshots after the good end, N + K + 1).
    None: the job has no distrain checkpoint."""
    tiers = intervals(job)
    if tiers is None:
        return None
    disk, memory = tiers
    destroyed = {"corrupt_newest": disk, "corrupt_memory": memory or 0}.get(fault or "", 0)
    return min(disk, memory or disk) + 1 + destroyed


def lost_steps_verdict(verdict: Verdict, job: Job, fault: str | None,
                       lost: int | None) -> Verdict:  # fmt: skip
    """`verdict`, or "lost steps" when a trial that kept the promise lost more steps than its
    bound (lost_bound).  `lost` None (recovery.py says why: a missed fault, a replica kind that
    heals from a live group, a kind without distrain's checkpoints or step records) is not
    checked: there is no measured figure to hold to the bound."""
    bound = lost_bound(job, fault)
    if not verdict.ok or lost is None or bound is None or lost <= bound:
        return verdict
    why = f"lost {lost} steps, more than {bound} (finest checkpoint interval {interval(job)})"
    return Verdict("lost steps", f"{why}; {verdict.detail}" if verdict.detail else why,
                   [*verdict.problems, "lost steps"])  # fmt: skip


def _undocumented(
    fault: str | None, kind: Kind, runs: list[RunRecord]
) -> list[tuple[int, int, str]]:
    """The runs (index, exit, last line) that exited non-zero in no documented stop of `fault`."""
    if fault is None:
        return []
    odd = []
    for i, run in enumerate(runs):
        line = run.last_line()
        if run.rc not in (0, None) and documented(fault, kind.name, run.rc, line) is None:
            odd.append((i, run.rc, line))
    return odd


def resume_verdict(
    kind: Kind, job: Job, runs: list[RunRecord], good: int | None
) -> tuple[str | None, str]:
    """A restarted job with checkpoints must resume from the newest checkpoint valid at the fault
    or a newer one: (the problem or None, the detail: where it resumed)."""
    if kind.replicas or job.ckpt is None or good is None:
        return None, ""
    restarted = len(runs) > 1 or any(r.restarted() for r in runs)
    steps = [s for r in runs for s in r.resumed_steps()]
    if not restarted:
        return None, "not restarted"
    if not steps:
        return "not resumed", f"restarted, but resumed from no checkpoint (step {good} was valid)"
    if min(steps) < good:
        return "lost work", f"resumed from step {min(steps)}, though step {good} was valid"
    return None, f"resumed from step {min(steps)} (newest valid at the fault: {good})"


def _expected_step(job: Job) -> int | None:
    """The last step a replica job trains to (its `--steps`)."""
    argv = job.argv
    return int(argv[argv.index("--steps") + 1]) if "--steps" in argv else None


def _restart_verdict(reference: dict[str, str] | None, result: dict[str, str]) -> str | None:
    if reference is None:
        return "no reference run"
    differ = sorted(k for k in reference if result.get(k) != reference[k])
    return f"differs from the uninterrupted run in {', '.join(differ[:4])}" if differ else None


def _went_on(
    reference: dict[str, str] | None, result: dict[str, str], runs: list[RunRecord]
) -> str | None:
    """An elastic job that lost a node: fine when it finished at the reference's last step,
    resumed from a checkpoint, and a node did leave (the sum over fewer ranks rounds otherwise,
    so bit for bit is not the promise); the line that says so, else None."""
    left = [i for r in runs for i, rc in enumerate(r.rcs) if rc != 0]
    resumed = [
        line for r in runs for line in r.stdout.splitlines() if "distrain: resumed from" in line
    ]
    if reference is None or result.get("step") != reference.get("step") or not left or not resumed:
        return None
    return f"went on without node {left[0]} to step {result['step']}; {resumed[-1].strip()[:120]}"
