"""The chaos campaign's oracle: how a trial ended, judged against what a failure may cost.

A trial ends **healed** (exit 0, and bit for bit its uninterrupted run's result; a replica kind:
every group at the same last step with equal parameters) or **stopped** (a non-zero exit within
its bound whose last line is distrain's own, naming the cause). Anything else breaks the oracle:
it hung past its bound, diverged, left a process behind, lost a good checkpoint, or stopped
without saying why. A per-process batch kind (``nodes_elastic_batch``) is judged by the samples it
trained on, and stopping because its loader refused the job's own checkpoint breaks it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kinds import SAMPLES_OK, Job, Kind, replica_verdict

#: a stopped job's last line is distrain's verdict (not, say, a summary printed after it)
CAUSE_WORDS = ("failed", "error", "stopped", "frozen", "not restarted", "ended")
#: what a loader that refuses a checkpoint says (the defect of issue 41 on a world change)
_REFUSED = "cannot resume loader"
#: verdicts that keep the promise
GOOD = ("healed", "stopped")
#: verdicts that break it, in the order they are reported when several apply
BAD = (
    "hung",
    "leftovers",
    "diverged",
    "lost checkpoint",
    "no cause",
    "no result",
    "refused its own checkpoint",
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
) -> Verdict:
    """The verdict of one trial from its runs, the processes it left and its checkpoints."""
    problems = []
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
            why = replica_verdict(result) if kind.replicas else _restart_verdict(reference, result)
            if kind.samples:  # judged by what it trained on, whatever the world sizes it had
                why = None if result["samples"] == SAMPLES_OK else result["samples"]
                said = [ln for r in runs for ln in r.stdout.splitlines() if "at sample" in ln]
                detail = said[-1].strip()[:160] if said and not why else ""
            elif why and kind.elastic and (went_on := _went_on(reference, result, runs)):
                why, detail = None, went_on
            if why:
                problems.append("diverged")
                detail = why
            else:
                word = "healed"
    elif last.rc is not None:
        line = last.last_line()
        if line.startswith("distrain") and any(w in line for w in CAUSE_WORDS):
            word, detail = "stopped", line
        else:
            problems.append("no cause")
            detail = line or "(nothing printed)"
    refused = [ln for r in runs for ln in (r.stdout + r.stderr).splitlines() if _REFUSED in ln]
    if kind.samples and refused:  # issue 41: a world change refused, in any run of the trial
        problems.append("refused its own checkpoint")
        detail = refused[0].strip()[:200]
    if any(r.rcs for r in runs):  # two nodes: each run's exit per node
        exits = " then ".join(str(r.rcs) for r in runs)
        detail = (detail + "; " if detail else "") + f"node exits {exits}"
    if leftovers:
        detail = (detail + "; " if detail else "") + "left: " + ", ".join(leftovers)
    if problems:
        first = next(p for p in BAD if p in problems)
        return Verdict(first, detail, problems)
    return Verdict(word, detail)


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
