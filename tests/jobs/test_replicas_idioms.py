"""Modes × idioms, the `--replicas 2` row (docs/compatibility.md): each idiom works or is refused.

"Works": `distrain run --replicas 2 -n 1` exits 0, the launcher's end check finds both groups at
the last step with equal states, and the parameters equal the script's own reference
(`torchrun --nproc-per-node 2`) bit for bit: two groups of one process split each global batch
as two ranks do, and TorchFT averages two gradients as DDP does (a halving is exact).
"Refused": the job stops with one line naming the script and what to use instead, exit code 3,
at its first optimizer step (nothing joins such a script to the groups: it would train as two
independent copies) or at its own DistributedSampler (over its group's ranks only: every group
would train on the same samples), or at its ``prepare_loader`` when the batch_size comes from
``ctx.world_size`` (``GLOBAL // ctx.world_size``: one group's size, so the groups would train a
global batch R times larger than the script means).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers import python
from helpers.compat import compat, run_idiom

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)

STEPS = "12"
TORCHRUN = [python(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
REPLICAS = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1"]
WORKS = ["readme", "ctx_step", "per_process_batch"]
REFUSED = {
    "torchrun_plain": "torchrun_plain.py",
    "accelerate": "accelerate_script.py",
    "lightning": "lightning_script.py",
    "fabric": "fabric_script.py",
    "device_mesh": "device_mesh.py",
    "own_sampler": "own_sampler.py",  # init() and a prepared model, but its own sampler
    "self_start": "self_start.py",  # mp.spawn's children: torchrun-style, no distrain.init()
}
WHY = (
    "needs distrain.init(), ctx.prepare_model and ctx.prepare_loader: refused at its "
    "DistributedSampler or its first optimizer step"
)


@pytest.mark.parametrize(
    "idiom", [pytest.param(i, marks=compat("replicas", i)) for i in WORKS], ids=WORKS
)
def test_replica_groups_train_as_the_scripts_own_launcher(idiom: str, tmp_path: Path) -> None:
    ref, ref_finals = run_idiom(TORCHRUN, idiom, tmp_path / "ref", env={"IDIOM_STEPS": STEPS})
    assert ref.returncode == 0 and len(ref_finals) == 2, ref.stderr[-3000:]
    res, finals = run_idiom(REPLICAS, idiom, tmp_path / "run", env={"IDIOM_STEPS": STEPS})
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"replica groups 0, 1 ended at step {STEPS} with equal states" in res.stderr
    # both groups' rank 0 write final.0.json: equal states (the check above), one file
    assert [(r["rank"], r["steps"]) for r in finals] == [(0, int(STEPS))], finals
    assert finals[0]["digest"] == ref_finals[0]["digest"], (finals, ref_finals)


@pytest.mark.parametrize(
    "idiom",
    [pytest.param(i, marks=compat("replicas", i, "refused", why=WHY)) for i in REFUSED],
    ids=list(REFUSED),
)
def test_scripts_not_joined_to_the_groups_are_refused_in_one_line(
    idiom: str, tmp_path: Path
) -> None:
    res, finals = run_idiom(REPLICAS, idiom, tmp_path / "run", env={"IDIOM_STEPS": STEPS})
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-3000:]
    assert finals == []  # no process trained to its end
    errors = [line for line in res.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, res.stderr[-3000:]
    assert errors[0].startswith(
        f"distrain run: error: {REFUSED[idiom]} cannot run under --replicas: "
    ), errors
    assert "--replicas needs distrain.init() and ctx.prepare_model(model)" in errors[0]
    assert errors[0].endswith("for plain data parallel use `distrain run -n N`")


@pytest.mark.parametrize(
    "idiom",
    [
        pytest.param(
            "global_batch",
            marks=compat(
                "replicas",
                "global_batch",
                "refused",
                why="`batch_size = GLOBAL // ctx.world_size` sees one group's size: refused at "
                "`ctx.prepare_loader` (write a per-process batch_size)",
            ),
        )  # fmt: skip
    ],
)
def test_a_batch_from_world_size_is_refused_under_replicas(idiom: str, tmp_path: Path) -> None:
    """The groups would train a global batch twice the script's: one line, exit 3, at start."""
    res, finals = run_idiom(REPLICAS, idiom, tmp_path / "run", env={"IDIOM_STEPS": STEPS})
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-3000:]
    assert finals == [] and not list((tmp_path / "run").glob("samples.*"))  # nothing trained
    errors = [line for line in res.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, res.stderr[-3000:]
    assert errors[0].startswith(
        "distrain run: error: global_batch.py cannot run under --replicas: its batch_size comes "
        "from world_size (line "
    ), errors
    assert "the 2 groups would train a global batch 2× the one it means" in errors[0]
