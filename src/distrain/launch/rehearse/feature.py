"""The rehearsal (``--cpu``) behind the launcher's seam (launch/seam.py): the workers'
environment when the plan is made, what the workers mapped at the end."""

from __future__ import annotations

import os

from distrain.contract import CPU_REHEARSAL
from distrain.launch.agent import PROG
from distrain.launch.rehearse import environment
from distrain.launch.seam import Draft, Feature
from distrain.launch.self_start import detect


class Rehearsal(Feature):
    """CPU processes stand in for the GPUs."""

    def adjust(self, draft: Draft) -> None:
        """The stand-in environment; a script that starts its own workers runs once."""
        if not draft.parsed.cpu:
            return
        script = draft.parsed.training_script
        found, note = (
            detect.decide(script, draft.parsed.self_starting) if draft.reads_script else (None, "")
        )
        agents, line = environment.configure(script, draft.nproc, draft.env, found)
        draft.args["nproc_per_node"] = str(agents)
        draft.lines[:0] = [line] + ([f"{PROG}: {note}"] if note else [])

    def end_lines(self, folder: str | None) -> None:
        """What the workers mapped (``--cpu`` set the variable for them), before the breakdown:
        seen after the verdict, as the job's last line, in the chaos campaign."""
        if CPU_REHEARSAL in os.environ:
            environment.finish(folder)


def feature(name: str) -> Feature:
    """The rehearsal's hooks (launch/seam.py)."""
    return Rehearsal()
