"""cluster/slurm_requeue.py: which stop signals requeue a SLURM job; a requeue SLURM SIGTERMs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from distrain.cluster import slurm_requeue as requeue
from distrain.cluster.slurm_requeue import _why_stopped, requeue_after_stop
from distrain.settings import Settings


def test_sigusr1_always_requeues() -> None:
    assert _why_stopped(signal.SIGUSR1, {}) == "time-limit warning (SIGUSR1)"


@pytest.mark.parametrize(
    ("fields", "why"),
    [({"PreemptTime": "2024-01-01T00:00:00"}, "preemption (SIGTERM)"),
     ({"PreemptTime": "None", "JobState": "TIMEOUT"}, "time limit (SIGTERM)"),
     ({"JobState": "COMPLETING", "Reason": "TimeLimit"}, "time limit (SIGTERM)"),
     ({"PreemptTime": "None", "JobState": "CANCELLED"}, None),
     ({"PreemptTime": "Unknown"}, None), ({}, None)],
)  # fmt: skip
def test_sigterm_requeues_only_on_preemption_or_time_limit(
    fields: dict[str, str], why: str | None
) -> None:
    assert _why_stopped(signal.SIGTERM, fields) == why


def test_sigint_never_requeues() -> None:
    assert _why_stopped(signal.SIGINT, {"PreemptTime": "2024-01-01"}) is None


def test_outside_slurm_nothing_happens() -> None:
    assert Settings.read({}).slurm_job_id is None
    assert Settings.read({"SLURM_JOB_ID": "77"}).slurm_job_id == "77"
    assert requeue_after_stop(signal.SIGUSR1, None) is None


def test_without_scontrol_the_line_says_resubmit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requeue.shutil, "which", lambda name: None)
    assert requeue_after_stop(signal.SIGINT, "77") is None
    assert (
        requeue_after_stop(signal.SIGUSR1, "77")
        == "distrain: SLURM job 77 not requeued: no scontrol on this node; resubmit it to resume"
    )


def test_a_non_requeueable_job_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requeue.shutil, "which", lambda name: "/usr/bin/scontrol")
    monkeypatch.setattr(requeue, "job_fields", lambda job_id: {"Requeue": "0"})
    line = requeue_after_stop(signal.SIGUSR1, "78")
    assert line is not None and "is not requeue-able" in line
    monkeypatch.setattr(requeue, "job_fields", lambda job_id: {"PreemptTime": "None"})
    assert "SIGTERM without preemption or time limit" in (
        requeue_after_stop(signal.SIGTERM, "78") or ""
    )


def _scontrol_killed_by_its_own_requeue(folder: Path) -> None:
    """An `scontrol` that, like the real one inside the job it requeues, is sent SIGTERM by the
    requeue before it answers (SLURM signals every process of the job's steps)."""
    tool = folder / "scontrol"
    tool.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-o" ]; then echo "JobId=79 Requeue=1 PreemptTime=None"; exit 0; fi\n'
        "kill -TERM $$\n"
        "echo requeued\n"
    )
    tool.chmod(0o755)


def test_the_requeue_outlives_the_sigterm_it_brings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real child process gets SIGTERM while it requeues: the request still completes and
    the line says requeued (the slurm job test lost this race under load: "exit -15")."""
    _scontrol_killed_by_its_own_requeue(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert requeue_after_stop(signal.SIGUSR1, "79") == (
        "distrain: SLURM job 79 requeued after its checkpoint (time-limit warning (SIGUSR1)); "
        "it resumes from there"
    )


def test_a_killed_requeue_says_it_may_have_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed by a signal it cannot ignore, scontrol's fate is unknown: the line says where to
    look, not that the job was not requeued."""
    _scontrol_killed_by_its_own_requeue(tmp_path)
    (tmp_path / "scontrol").write_text(
        (tmp_path / "scontrol").read_text().replace("kill -TERM $$", "kill -KILL $$")
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert requeue_after_stop(signal.SIGUSR1, "79") == (
        "distrain: SLURM job 79: scontrol requeue was killed by SIGKILL: see `squeue -j 79` "
        "whether it is queued again; the checkpoint is written either way"
    )
