"""Modes × idioms, the launcher rows: plain `distrain run` (fast start), `--start-method spawn`
and ``strategy="fsdp"``, each idiom against its own reference run (docs/compatibility.md).

The reference of a script is the way its authors launch it: `torchrun --nproc-per-node 2`, or
`python script.py` for a script that starts its own workers.  "Works" means exit 0, every rank
finished every step, every rank holds the same parameters, and they equal the reference's bit
for bit.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from helpers import SCRIPTS, python
from helpers.compat import IDIOMS, compat, race_reported_by, reference_digest, run_idiom
from helpers.torch_races import torch_exit_race

STEPS = "12"
DISTRAIN = [python(), "-m", "distrain.cli", "run", "-n", "2"]
_USES_PREPARE_MODEL = {"readme", "ctx_step", "per_process_batch", "global_batch", "own_sampler"}


def _reference(idiom: str, factory: pytest.TempPathFactory) -> str:
    """The idiom's reference digest: one run for its cells here and in test_modes_idioms_cpu."""
    return reference_digest(idiom, factory, STEPS)


def _check_works(result: Any, finals: list[dict[str, Any]], reference: str, idiom: str) -> None:
    if not torch_exit_race(result, race_reported_by(idiom)):
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert [r["rank"] for r in finals] == [0, 1]
    assert all(r["steps"] == int(STEPS) and r["world"] == 2 for r in finals), finals
    assert {r["digest"] for r in finals} == {reference}, (finals, reference)


def _plain_marks(idiom: str) -> list[Any]:
    # the mesh script shards with fully_shard itself: its plain run is also its FSDP cell
    extra = [compat("fsdp", idiom)] if idiom == "device_mesh" else []
    return [compat("plain", idiom), *extra]


@pytest.mark.parametrize(
    "idiom", [pytest.param(i, marks=_plain_marks(i)) for i in IDIOMS], ids=list(IDIOMS)
)
def test_plain_distrain_run_equals_the_scripts_own_launcher(
    idiom: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`distrain run -n 2` (the fast start) ends bit for bit where torchrun (or python) ends."""
    reference = _reference(idiom, tmp_path_factory)
    result, finals = run_idiom(DISTRAIN, idiom, tmp_path / "run", env={"IDIOM_STEPS": STEPS})
    _check_works(result, finals, reference, idiom)


@pytest.mark.parametrize(
    "idiom", [pytest.param(i, marks=compat("spawn", i)) for i in IDIOMS], ids=list(IDIOMS)
)
def test_spawn_start_equals_the_scripts_own_launcher(
    idiom: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`--start-method spawn` (torchrun's fresh interpreters) ends where the reference ends."""
    reference = _reference(idiom, tmp_path_factory)
    launcher = [*DISTRAIN, "--start-method", "spawn"]
    result, finals = run_idiom(launcher, idiom, tmp_path / "run", env={"IDIOM_STEPS": STEPS})
    _check_works(result, finals, reference, idiom)


@pytest.mark.parametrize(
    "idiom",
    [pytest.param(i, marks=compat("fsdp", i)) for i in sorted(_USES_PREPARE_MODEL)],
)
def test_fsdp_strategy_equals_ddp(
    idiom: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``prepare_model(..., strategy="fsdp")`` trains to the DDP reference's parameters, bit for
    bit (this MLP's reduce-scatter sums in all-reduce's order on 2 gloo ranks)."""
    reference = _reference(idiom, tmp_path_factory)
    env = {"IDIOM_STEPS": STEPS, "IDIOM_STRATEGY": "fsdp"}
    result, finals = run_idiom(DISTRAIN, idiom, tmp_path / "run", env=env)
    _check_works(result, finals, reference, idiom)


_NOT_PREPARED = sorted(set(IDIOMS) - _USES_PREPARE_MODEL - {"device_mesh"})


@pytest.mark.parametrize(
    "idiom",
    [
        pytest.param(
            i,
            marks=compat(
                "fsdp",
                i,
                "n/a",
                why="`strategy=` is an argument of `ctx.prepare_model`, which the script does "
                "not call: it shards (or not) with its own framework's API",
            ),
        )  # fmt: skip
        for i in _NOT_PREPARED
    ],
)
def test_scripts_without_prepare_model_have_no_fsdp_strategy_to_choose(idiom: str) -> None:
    """The n/a cells: the script never calls ``prepare_model`` (read from its source)."""
    tree = ast.parse((SCRIPTS / "idioms" / IDIOMS[idiom][1]).read_text())
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert "prepare_model" not in called
