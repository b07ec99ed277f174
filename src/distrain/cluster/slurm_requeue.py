"""Requeue a SLURM job once its checkpoint is written, so it resumes instead of ending.

The exported batch script asks SLURM for ``SIGUSR1`` shortly before the time limit
(``#SBATCH --signal=USR1@N``) and is requeue-able (``--requeue``).  After the job-wide checkpoint
(:class:`distrain.process.signals.Preemption`), rank 0 alone runs ``scontrol requeue
$SLURM_JOB_ID``, as Lightning's SLURM auto-requeue does: SLURM ends the job, puts it back in the
queue under the same id, and the next start resumes from the checkpoint.

Which stop signals requeue:

- ``SIGUSR1``: the time-limit warning (or ``scancel --signal=USR1``): always.
- ``SIGTERM`` while SLURM preempts the job (``scontrol show job`` has a ``PreemptTime``) or ends it
  at its time limit (``Reason=TimeLimit``; both seen with slurm 22.05).  A job that exits within its
  preemption grace time counts as *completed* to SLURM, not requeued, even under
  ``PreemptMode=REQUEUE``.
- any other ``SIGTERM`` (``scancel``) and ``SIGINT``: never; cancelling must cancel.
"""

from __future__ import annotations

import shutil
import signal
import subprocess

#: the signal the exported script asks SLURM to send before the time limit
REQUEUE_SIGNAL = signal.SIGUSR1
_TIMEOUT_S = 30.0
#: `scontrol requeue` runs inside the job it requeues: SLURM's requeue SIGTERMs every process of
#: the job's steps, scontrol included, often before its reply arrives (seen under load: "exit
#: -15" though slurmctld logged "Requeuing JobId=3"). Ignored (SIG_IGN survives exec), SIGTERM
#: leaves it to finish; SLURM's SIGKILL after KillWait still ends it.
_IGNORING_SIGTERM = ("sh", "-c", "trap '' TERM; exec \"$@\"", "sh")


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol -o show job`` as a dict; {} when scontrol is missing or fails."""
    try:
        out = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields: dict[str, str] = {}
    for token in out.stdout.split():
        key, _, value = token.partition("=")
        fields.setdefault(key, value)
    return fields


def _why_stopped(signum: int, fields: dict[str, str]) -> str | None:
    """The reason a stop by `signum` should requeue the job, or None when it should not."""
    if signum == REQUEUE_SIGNAL:
        return "time-limit warning (SIGUSR1)"
    if signum != signal.SIGTERM:
        return None
    if fields.get("PreemptTime", "None") not in ("None", "", "Unknown"):
        return "preemption (SIGTERM)"
    if (
        fields.get("JobState") == "TIMEOUT" or fields.get("Reason") == "TimeLimit"
    ):  # COMPLETING, TimeLimit
        return "time limit (SIGTERM)"
    return None


def requeue_after_stop(signum: int, job_id: str | None) -> str | None:
    """On rank 0 after the stop checkpoint: requeue this SLURM job when the signal calls for it.

    `job_id`: this job's SLURM id (``SLURM_JOB_ID``, the array task's own id for job arrays; from
    distrain.settings), None outside SLURM.  Returns the one line to print (None outside SLURM or
    for signals that never requeue).  Never raises: the checkpoint is written, so a failed requeue
    costs a manual resubmit only.
    """
    if job_id is None or signum not in (REQUEUE_SIGNAL, signal.SIGTERM):
        return None
    if shutil.which("scontrol") is None:
        return (
            f"distrain: SLURM job {job_id} not requeued: no scontrol on this node; "
            "resubmit it to resume"
        )
    fields = job_fields(job_id)
    why = _why_stopped(signum, fields)
    if why is None:
        return (
            f"distrain: SLURM job {job_id} not requeued: SIGTERM without preemption or time "
            "limit (scancel?)"
        )
    if fields.get("Requeue") == "0":
        return (
            f"distrain: SLURM job {job_id} is not requeue-able (sbatch --no-requeue "
            "or JobRequeue=0): "
            "not requeued; resubmit it to resume from the checkpoint"
        )
    try:
        out = subprocess.run(
            [*_IGNORING_SIGTERM, "scontrol", "requeue", job_id],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"distrain: SLURM job {job_id} not requeued: scontrol requeue: {err}"
    if out.returncode < 0:
        return (
            f"distrain: SLURM job {job_id}: scontrol requeue was killed by "
            f"{signal.Signals(-out.returncode).name}: see `squeue -j {job_id}` whether it is "
            "queued again; the checkpoint is written either way"
        )
    if out.returncode != 0:
        detail = (out.stderr.strip() or out.stdout.strip()).splitlines()
        return (
            f"distrain: SLURM job {job_id} not requeued ({why}): "
            f"{detail[-1] if detail else f'exit {out.returncode}'}"
        )
    return (
        f"distrain: SLURM job {job_id} requeued after its checkpoint ({why}); it resumes from there"
    )
