"""The module figures of scripts/structure_metrics.py equal what the processes hold.

scripts/module_census.py runs `distrain run -n 1` of a 4-step script: each figure is read from the
processes' own ``sys.modules`` at the first step.  Here the worker's figure is checked against
the worker's direct dump, printed on its stdout (another route out of the job), and the
launcher's against what a launcher is: the pipeline's modules, none of a worker's.
"""

from __future__ import annotations

import sys

import pytest
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import module_census  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("options", [(), ("--start-method", "spawn")], ids=["fast", "spawn"])
def test_the_figure_is_the_processes_own_dump(options: tuple[str, ...]) -> None:
    """Worker: the figure equals its own dump; launcher: launch/ modules, no worker layers."""
    found = module_census.census(*options, timeout=240)
    assert found.worker == found.worker_printed
    assert "distrain.worker.context" in found.worker
    assert "distrain.launch.plan" not in found.worker  # a worker without the launcher's plan
    assert {"distrain.cli", "distrain.launch.cli", "distrain.launch.plan"} <= set(found.launcher)
    assert not [m for m in found.launcher if m.startswith(("distrain.worker", "distrain.parallel"))]
    fast = "distrain.worker.fast_start.forked" in found.worker
    assert fast == (not options)
    # the job's folder held its event stream (the breakdown a 4-step job reports)
    assert "distrain-job/events.jsonl" in found.files
