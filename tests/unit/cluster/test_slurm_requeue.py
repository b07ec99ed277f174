"""cluster/slurm_requeue.py: which stop signals requeue a SLURM job (scontrol is never called)."""

from __future__ import annotations

import signal

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
