"""Self-start behind the launcher's seam (launch/seam.py): a script that starts its own workers
runs once, its children are the job (launch/self_start/detect.py says when)."""

from __future__ import annotations

import os

from distrain.launch.agent import PROG
from distrain.launch.seam import Draft, Feature
from distrain.launch.self_start import detect


class SelfStart(Feature):
    """The decision, made once by the plan and said in one line when the job starts."""

    def adjust(self, draft: Draft) -> None:
        """Run the script once when it starts its workers itself (torchrun's agent only)."""
        parsed = draft.parsed
        if not draft.reads_script or parsed.cpu or parsed.launcher != "torchrun":
            return  # under --cpu the rehearsal decides with it (launch/rehearse/feature.py)
        script = parsed.training_script
        # a guess that depends on the script's arguments never wins silently
        found, note = detect.decide(script, parsed.self_starting)
        if found is None:
            if note:
                draft.lines.append(f"{PROG}: {note}")
            return
        detect.refuse_nodes(found, os.path.basename(script), parsed.nnodes)
        detect.mark(draft.env)
        draft.lines.append(found.start_line(PROG, os.path.basename(script), draft.nproc))
        draft.args["nproc_per_node"] = "1"


def feature(name: str) -> Feature:
    """Self-start's hooks (launch/seam.py)."""
    return SelfStart()
