"""`distrain run --replicas` follows the optimizer: the README's `opt.step()` is committed, healed.

tests/scripts/replica_readme.py is the README's conversion (``loss.backward()``, ``opt.step()``,
no ``ctx.step``, no ``ckpt.restore``); tests/scripts/replica_plain_torchrun.py a plain torchrun
script that nothing joins to the groups.  Real TorchFT lighthouse, real groups, real SIGKILL.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import SCRIPTS, python, run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)

README = str(SCRIPTS / "replica_readme.py")
PLAIN = str(SCRIPTS / "replica_plain_torchrun.py")


def _finals(out: Path) -> dict[tuple[int, int], dict[str, object]]:
    found = {}
    for path in out.glob("final.*.json"):
        _, group, rank, _ = path.name.split(".")
        found[int(group), int(rank)] = json.loads(path.read_text())
    return found


def _readme_job(
    tmp_path: Path, *extra: str, procs: int = 1, name: str = "out", start: str = "fork"
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / name
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", str(procs),
           *(["--start-method", "spawn"] if start == "spawn" else []),
           *(["--cpu"] if start == "cpu" else []),
           README, "--out", str(out), *extra]  # fmt: skip
    return run(cmd, timeout=280), out


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("idiom", "cpu"),
    [("zero-first", False), ("backward-first", False), ("scaler", False), ("zero-first", True)],
    ids=["zero-first", "backward-first", "scaler", "cpu-loader-workers"],
)
def test_readme_script_heals_from_a_live_group_and_the_groups_end_equal(
    tmp_path: Path, idiom: str, cpu: bool
) -> None:
    """Group 1's worker SIGKILLed right after step 20: the launcher says the true step (it said
    "lost at step 0": nothing but ctx.step committed), the replacement copies model and Adam
    state from group 0 (it once healed from nothing and trained on alone), and both groups end
    at step 80 with the same parameters and optimizer state, bit for bit.  Under ``--cpu`` the
    prepared loader forks DataLoader workers: each once ran the group's shutdown as it ended
    (inherited from its parent) and hung the job."""
    import psutil

    res, out = _readme_job(
        tmp_path, "--idiom", idiom, "--steps", "80", "--kill", "20:1:0", "--step-sleep", "0.05",
        start="cpu" if cpu else "fork",
    )  # fmt: skip
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(out) in part for part in p.info["cmdline"] or [])  # a title is one string
    ]
    assert not left, left  # a DataLoader worker of the killed process once stayed, hung
    assert res.returncode == 0, res.stderr[-3000:]
    assert "distrain run: replica group 1 lost at step 20 (rank 0, pid" in res.stderr, res.stderr
    assert re.search(r"replica group 1 healed from group 0 at step \d+ in", res.stderr), res.stderr
    finals = _finals(out)
    assert sorted(finals) == [(0, 0), (1, 0)], finals
    assert finals[0, 0]["step"] == finals[1, 0]["step"] == 80
    assert finals[0, 0]["params"] == finals[1, 0]["params"]
    assert "replica groups 0, 1 ended at step 80 with equal states" in res.stderr, res.stderr
    starts = (out / "starts").read_text().splitlines()
    assert [line.split()[1] for line in starts].count("1") == 2, starts  # killed once, replaced


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_readme_script_two_processes_per_group_heals_rank_by_rank(tmp_path: Path) -> None:
    """2 groups × 2 processes; rank 1 of group 1 SIGKILLed after step 15: its group restarts,
    heals from group 0, and every rank ends equal to its peer in the other group."""
    res, out = _readme_job(
        tmp_path, "--steps", "50", "--kill", "15:1:1", "--step-sleep", "0.05", procs=2
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "distrain run: replica group 1 lost at step 15 (rank 1, pid" in res.stderr, res.stderr
    assert "replica group 1 healed from group 0 at step" in res.stderr, res.stderr
    finals = _finals(out)
    assert sorted(finals) == [(0, 0), (0, 1), (1, 0), (1, 1)], finals
    for rank in (0, 1):
        assert finals[0, rank]["step"] == finals[1, rank]["step"] == 50
        assert finals[0, rank]["params"] == finals[1, rank]["params"]


@pytest.mark.timeout(300)
def test_opt_step_trains_exactly_as_ctx_step(tmp_path: Path) -> None:
    """Uninterrupted, the README's `opt.step()` and `ctx.step(opt)` give the same final state bit
    for bit: the optimizer's own step is committed as ctx.step is, once per step."""
    plain, out_plain = _readme_job(tmp_path, "--steps", "30", name="opt_step")
    ref, out_ref = _readme_job(tmp_path, "--steps", "30", "--idiom", "ctx-step", name="ctx_step")
    assert plain.returncode == 0 and ref.returncode == 0, (plain.stderr + ref.stderr)[-3000:]
    finals, reference = _finals(out_plain), _finals(out_ref)
    assert finals[0, 0]["step"] == reference[0, 0]["step"] == 30
    assert finals[0, 0]["params"] == finals[1, 0]["params"] == reference[0, 0]["params"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_plain_torchrun_script_is_refused_in_one_line(tmp_path: Path, start: str) -> None:
    """No distrain.init(): nothing joins the script to the groups.  It once ran as R independent
    unreplicated copies and the job passed; now its first optimizer step stops the job."""
    import psutil

    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1",
           *(["--start-method", "spawn"] if start == "spawn" else []),
           *(["--cpu"] if start == "cpu" else []), PLAIN]  # fmt: skip
    res = run(cmd, timeout=280)
    assert res.returncode == 3, res.stderr[-3000:]
    assert "trained unreplicated" not in res.stdout  # refused at the first step
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(
        "distrain run: error: replica_plain_torchrun.py cannot run under --replicas: this process "
        "stepped an optimizer without calling distrain.init()"
    ), res.stderr[-3000:]
    assert "--replicas needs distrain.init() and ctx.prepare_model(model)" in lines[-1]
    assert "for plain data parallel use `distrain run -n N`" in lines[-1]
    assert len(lines) == 2, res.stderr  # the start line and the refusal: no agent noise
    left = [p for p in psutil.process_iter(["cmdline"]) if PLAIN in (p.info["cmdline"] or [])]
    assert not left, left  # no worker outlived the job (spawn's are in sessions of their own)


@pytest.mark.timeout(300)
def test_an_optimizer_over_an_unprepared_model_is_refused(tmp_path: Path) -> None:
    res, _ = _readme_job(tmp_path, "--idiom", "unprepared", "--steps", "10")
    assert res.returncode == 3, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("distrain run: error: replica_readme.py cannot run under --replicas: ")
    assert "stepped a SGD over no model given to ctx.prepare_model" in last, last


@pytest.mark.timeout(300)
def test_the_end_check_fails_when_a_group_reports_no_final_state(tmp_path: Path) -> None:
    """Group 1 ends with exit code 0 outside distrain's end (os._exit): no final state.  The
    check once compared only the groups that reported, and passed by silence.  Fresh
    interpreters: a forked worker's os._exit is never seen by the agent (docs/fault_tolerance.md)"""
    res, _ = _readme_job(tmp_path, "--steps", "10", "--silent-group", "1", start="spawn")
    assert res.returncode == 1, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "distrain run: error: replica group 1 ended without reporting a final state"
    ), res.stderr[-3000:]
