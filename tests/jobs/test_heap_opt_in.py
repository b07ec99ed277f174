"""The allocator change under FSDP is opt-in: a 2-rank FSDP job leaves glibc alone unless asked.

``DISTRAIN_MAP_LARGE_BUFFERS=1`` goes from the environment through ``Settings`` and
``ctx.prepare_model`` to ``mallopt`` (parallel/heap.py) in every rank; without it no
rank changes the allocator (docs/sharding.md has the memory and step-time figures of both).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import python, run

SCRIPT = """
import sys, torch, distrain
from distrain.parallel import heap, is_sharded

ctx = distrain.init(verbose=False)
model = ctx.prepare_model(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)), "fsdp")
# a file per rank: two ranks printing to one pipe can run their lines together
with open(f"{sys.argv[1]}/rank{ctx.rank}", "w") as f:
    f.write(f"rank {ctx.rank} sharded {is_sharded(model)} mapped {heap._applied}")
"""


@pytest.mark.parametrize("asked", [None, "1"])
def test_fsdp_changes_the_allocator_only_when_asked(asked: str | None, tmp_path: Path) -> None:
    script = tmp_path / "fsdp_once.py"
    script.write_text(SCRIPT)
    env = {"DISTRAIN_MAP_LARGE_BUFFERS": asked} if asked else None
    result = run(
        [python(), "-m", "distrain.cli", "run", "-n", "2", str(script), str(tmp_path)], 300, env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [(tmp_path / f"rank{r}").read_text() for r in (0, 1)]
    mapped = "True" if asked else "False"
    assert lines == [f"rank {r} sharded True mapped {mapped}" for r in (0, 1)], result.stdout
