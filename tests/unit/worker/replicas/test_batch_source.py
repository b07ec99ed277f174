"""Reading whether a prepare_loader call's batch_size comes from world_size (batch_source.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain.worker.replicas.batch_source import batch_mentions_world_size

CASES = {
    "loader = ctx.prepare_loader(ds, batch_size=48 // ctx.world_size)": "line 1",
    "loader = ctx.prepare_loader(ds, 48 // world_size)": "line 1",
    'loader = ctx.prepare_loader(ds, batch_size=48 // int(os.environ["WORLD_SIZE"]))': "line 1",
    "bs = GLOBAL // ctx.world_size\nloader = ctx.prepare_loader(ds, batch_size=bs)": (
        "line 2, through bs at line 1"
    ),
    "loader = ctx.prepare_loader(ds, batch_size=16)": None,
    "bs = 16\nloader = ctx.prepare_loader(ds, batch_size=bs)": None,
    "loader = ctx.prepare_loader(ds, batch_size=16, global_batch=48)": None,
}


@pytest.mark.parametrize("source", list(CASES))
def test_the_batch_size_expression_is_read(tmp_path: Path, source: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(source + "\n")
    line = source.count("\n") + 1
    assert batch_mentions_world_size(str(script), line) == CASES[source]
