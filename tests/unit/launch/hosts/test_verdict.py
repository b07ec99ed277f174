"""launch/hosts/verdict.py: the fan-out's last line for a failed job, from the hosts' verdicts."""

from __future__ import annotations

from dataclasses import dataclass

from distrain.launch.hosts.verdict import ROOT_CAUSE, failed_line


@dataclass
class End:
    name: str
    verdict: str | None
    root_cause: bool = False

    def reason(self) -> str:
        return "exited with code 1"


HINT = "; rerun the same command to resume from step 8 (/c/step_00000008)"


def test_the_root_causes_host_once_with_the_hint_from_another() -> None:
    h0 = End("h0", "rank 0 (pid 9) exited with code 1" + HINT)
    h1 = End("h1", "rank 1 (pid 7) exited with code 1: ValueError: boom", root_cause=True)
    # h0 was seen to fail first; h1 had the cause
    assert failed_line([h0, h1], h0) == (
        "job failed: host h1: rank 1 (pid 7) exited with code 1: ValueError: boom" + HINT
    )


def test_without_a_verdict_the_sessions_reason() -> None:
    lost = End("h1", None)
    assert failed_line([End("h0", None), lost], lost) == "job failed: host h1: exited with code 1"
    assert ROOT_CAUSE.match("distrain: rank 12 failed (root cause):")
