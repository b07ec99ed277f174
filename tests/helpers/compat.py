"""The modes × idioms table (docs/compatibility.md): which test proves which cell.

A test proves a cell by its marker::

    @compat("replicas", "readme")                       # works: the job ran and ended right
    @compat("replicas", "torchrun_plain", "refused", why="needs distrain.init()")

``outcome`` is ``works`` (a real job ran under the mode and its result was checked), ``refused``
(the job was refused at start with one line; ``why`` is the part of that line the test asserts)
or ``n/a`` (the combination has no meaning; ``why`` says why, and the test asserts what makes
it so).  On a ``pytest.param`` the same marker proves one cell per parameter.  With
``COMPAT_RESULTS=FILE`` set, every marked test appends its result to FILE, a JSON line
per cell; ``scripts/compat_table.py`` runs the marked tests that way and writes the table.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

# re-exported: the check of torch's gloo exit race (docs/compatibility.md) began here
from helpers.torch_races import torch_exit_race as torch_exit_race

#: the columns: key → heading
MODES = {
    "plain": "`distrain run` (fast start, the default)",
    "spawn": "`--start-method spawn`",
    "replicas": "`--replicas 2`",
    "elastic": "`--nnodes MIN:MAX` (a node lost)",
    "hosts": "`--hosts`",
    "cpu": "`--cpu` (stand-in GPUs)",
    "fsdp": '`strategy="fsdp"`',
}
#: the rows: key → (heading, the script in tests/scripts/idioms/)
IDIOMS = {
    "readme": ("the README's conversion: `loss.backward(); opt.step()`", "readme.py"),
    "ctx_step": ("`ctx.backward(loss); ctx.step(opt)`", "ctx_step.py"),
    "per_process_batch": ("a fixed batch per process", "per_process_batch.py"),
    "global_batch": ("`batch_size = GLOBAL // world_size`", "global_batch.py"),
    "own_sampler": ("the script's own DistributedSampler and DataLoader", "own_sampler.py"),
    "torchrun_plain": ("a torchrun script with no `distrain.init()`", "torchrun_plain.py"),
    "self_start": ("`mp.spawn` self-start", "self_start.py"),
    "accelerate": ("Hugging Face Accelerate", "accelerate_script.py"),
    "lightning": ("Lightning `Trainer`", "lightning_script.py"),
    "fabric": ("Lightning Fabric", "fabric_script.py"),
    "device_mesh": ("`init_device_mesh` as the group's start", "device_mesh.py"),
}
OUTCOMES = ("works", "refused", "n/a")


def compat(mode: str, idiom: str, outcome: str = "works", why: str = "") -> Any:
    """The marker that says which cell a test proves (checked here, at import)."""
    if mode not in MODES or idiom not in IDIOMS or outcome not in OUTCOMES:
        raise ValueError(f"unknown compat cell {mode!r} × {idiom!r} ({outcome!r})")
    if outcome != "works" and not why:
        raise ValueError(f"a {outcome} cell says why: {mode} × {idiom}")
    return pytest.mark.compat(mode=mode, idiom=idiom, outcome=outcome, why=why)


def record(item: pytest.Item, report: pytest.TestReport) -> None:
    """Append the result of each cell `item` proves to $COMPAT_RESULTS (if set)."""
    path = os.environ.get("COMPAT_RESULTS")
    if not path or (report.when != "call" and report.passed):
        return  # a passed setup or teardown says nothing yet; a failed or skipped one does
    for mark in item.iter_markers("compat"):
        line = dict(mark.kwargs, test=item.nodeid, result=report.outcome, when=report.when)
        with open(path, "a") as f:  # one short write per line: workers may append at once
            f.write(json.dumps(line) + "\n")


def run_idiom(
    launcher: list[str],
    idiom: str,
    out: Any,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> tuple[Any, list[dict[str, Any]]]:
    """Run `idiom`'s script under `launcher` (its argv before the script) with IDIOM_OUT=`out`;
    return the finished process and every rank's final record (rank order)."""
    from helpers.paths import SCRIPTS
    from helpers.processes import run

    script = SCRIPTS / "idioms" / IDIOMS[idiom][1]
    result = run(
        [*launcher, str(script)],
        env={"IDIOM_OUT": str(out), **(env or {})},
        timeout=timeout,
        cwd=script.parent,
    )
    return result, finals(out)


def reference_digest(idiom: str, factory: pytest.TempPathFactory, steps: str) -> str:
    """The digest of the idiom's script after `steps` steps on 2 processes, launched the way its
    authors launch it (``torchrun --nproc-per-node 2``, or ``python script.py`` for a script that
    starts its own workers): the reference of the plain, spawn, fsdp and ``--cpu`` cells.  One
    run per test run, whichever xdist worker asks first (helpers/session.py)."""
    import socket

    from helpers.processes import python
    from helpers.session import once

    def make(folder: Any) -> str:
        if idiom == "self_start":
            launcher = [python()]
        else:
            launcher = [python(), "-m", "torch.distributed.run", "--standalone"]
            launcher += ["--nproc-per-node", "2"]
        with socket.socket() as s:  # the self-starting script's fixed port, free for this run
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        env = {"IDIOM_STEPS": steps, "IDIOM_MASTER_PORT": port}
        result, ranks = run_idiom(launcher, idiom, folder, env=env)
        assert len(ranks) == 2, result.stderr[-3000:]
        return str(ranks[0]["digest"])

    return once(factory, f"idiom-ref-{idiom}-{steps}", make)


def race_reported_by(idiom: str) -> str:
    """Who reports torch's gloo exit race (helpers/torch_races.py) for `idiom`'s script under
    `distrain run`: its own mp.spawn for the self-starting script (its children are fresh
    interpreters whatever the start method), else distrain run (a spawned worker's SIGABRT)."""
    return "mp.spawn" if idiom == "self_start" else "distrain"


def finals(out: Any) -> list[dict[str, Any]]:
    """The final.<rank>.json records an idiom run left in `out`, in rank order."""
    from pathlib import Path

    records = [json.loads(p.read_text()) for p in Path(out).glob("final.*.json")]
    return sorted(records, key=lambda r: r["rank"])


def trained_samples(out: Any) -> list[list[int]]:
    """Per step (by step number, every rank and attempt together), the samples trained on."""
    from pathlib import Path

    steps: dict[int, list[int]] = {}
    for path in Path(out).glob("samples.*"):
        for line in path.read_text().splitlines():
            step, *indices = (int(v) for v in line.split())
            steps.setdefault(step, []).extend(indices)
    return [sorted(steps[s]) for s in sorted(steps)]
