"""Modes × idioms, the elastic and `--hosts` columns: the idiom scripts lose a node mid-epoch.

Each idiom that checkpoints with distrain (tests/scripts/idioms/: the README's conversion,
``ctx.step``, a fixed per-process batch, ``GLOBAL // world_size``) runs on two "nodes" of one
rank each, as one elastic job: by hand, `--nnodes 1:2` in two network namespaces, or one
`distrain run --hosts h0:1,h1:1 --nnodes 1:2` over real ssh.  Once the two ranks trained and
saved, node 1 is SIGKILLed whole (by hand) or its ssh session is (`--hosts`).  Works means: the
survivor finishes every step on a world of 1, and what the job trained on, rebuilt from every
attempt's sample files with the steps a restart rolled back removed, is the epochs'
permutations in order, each sample once, though the per-process idioms' global batch halved.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from helpers import SCRIPTS, python
from helpers.compat import IDIOMS, compat
from helpers.netns_hosts import Hosts
from helpers.ssh_cluster import ssh_cluster, ssh_of, start_job, until, wait_job

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(400)]

STEPS, SAMPLES = 40, 480  # 480: idiom_common.SAMPLES; 32 and 16 per step both divide it
CHECKPOINTED = ["readme", "ctx_step", "per_process_batch", "global_batch"]
RUN = [python(), "-m", "distrain.cli", "run"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"IDIOM_OUT": str(tmp_path / "out"), "IDIOM_STEPS": str(STEPS),
            "IDIOM_CKPT": str(tmp_path / "ckpt"), "IDIOM_STEP_SLEEP": "0.2"}  # fmt: skip


def _both_trained_and_saved(tmp_path: Path) -> bool:
    """Rank 1 trained (the world was 2) and a checkpoint of step ≥ 4 exists."""
    saved = [int(p.name.split("_")[1]) for p in (tmp_path / "ckpt").glob("step_*")]
    return bool(list((tmp_path / "out").glob("samples.1.*"))) and max(saved, default=0) >= 4


def trained_steps(out: Path) -> list[tuple[list[int] | None, int]]:
    """Per step the result stands on: (its samples, ranks in order; or None when unrecorded,
    its size).

    A file per (rank, process); the processes of one attempt start at the same step, one past
    the checkpoint it resumed from, so an earlier attempt's steps from there on were rolled back.
    The idiom scripts record a step after its checkpoint: a node killed in between leaves that
    step saved but unrecorded (None here, its size that of its attempt's other steps).
    """
    attempts: dict[int, dict[int, dict[int, list[int]]]] = {}
    for path in out.glob("samples.*"):
        rows = [[int(v) for v in line.split()] for line in path.read_text().splitlines()]
        if rows:
            rank = int(path.name.split(".")[1])
            attempts.setdefault(rows[0][0], {})[rank] = {r[0]: r[1:] for r in rows}
    starts, steps = sorted(attempts), []
    for i, start in enumerate(starts):
        last = starts[i + 1] - 1 if i + 1 < len(starts) else STEPS
        ranks = attempts[start]
        size = sum(len(rows[start]) for rows in ranks.values())
        for step in range(start, last + 1):
            rows = [ranks[rank].get(step) for rank in sorted(ranks)]
            known = all(row is not None for row in rows)
            steps.append(([i for row in rows for i in row or []] if known else None, size))
    return steps


def _check(tmp_path: Path, text: str) -> None:
    finals = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("final.*.json")]
    assert [(f["world"], f["steps"]) for f in finals] == [(1, STEPS)], text[-4000:]
    steps = trained_steps(tmp_path / "out")
    assert len(steps) == STEPS and sum(s is None for s, _ in steps) <= 1, steps
    stream = torch.cat(
        [
            torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(e))
            for e in range(sum(n for _, n in steps) // SAMPLES + 1)  # prepare_loader's seed 0
        ]
    ).tolist()
    at = 0
    for k, (samples, size) in enumerate(steps, 1):
        assert samples is None or samples == stream[at : at + size], f"step {k}: not the next"
        at += size
    assert at > SAMPLES  # past the first epoch, whose global batch changed midway


def _cells(mode: str) -> list[object]:
    return [pytest.param(i, marks=compat(mode, i)) for i in CHECKPOINTED]


@pytest.mark.parametrize("idiom", _cells("elastic"))
def test_an_elastic_job_loses_a_node_mid_epoch(idiom: str, hosts2: Hosts, tmp_path: Path) -> None:
    flags = ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"{hosts2.addrs[0]}:29400", "--rdzv-id", idiom, "--rdzv-conf",
             "last_call_timeout=2,keep_alive_interval=2", "--max-restarts", "3",
             "-n", "1"]  # fmt: skip
    argv = [*RUN, *flags, str(SCRIPTS / "idioms" / IDIOMS[idiom][1])]
    env = {
        **_env(tmp_path),
        "PYTHONPATH": f"{SCRIPTS / 'idioms'}{os.pathsep}{os.environ['PYTHONPATH']}",
    }
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [hosts2.start(i, argv, logs[i], env=env) for i in range(2)]
    deadline = time.monotonic() + 200
    while not _both_trained_and_saved(tmp_path):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail("\n".join(log.read_text()[-3000:] for log in logs))
        time.sleep(0.1)
    assert hosts2.kill_node(1)
    codes = hosts2.wait([procs[0]], 300, logs)
    text = logs[0].read_text()
    assert codes == [0], text[-4000:]
    _check(tmp_path, text)


@pytest.mark.parametrize("idiom", _cells("hosts"))
def test_a_hosts_job_loses_a_host_mid_epoch(idiom: str, tmp_path: Path) -> None:
    with ssh_cluster(2, tmp_path) as c:
        log = tmp_path / "job.log"
        forward = [a for k, v in _env(tmp_path).items() for a in ("-x", f"{k}={v}")]
        path = f"{SCRIPTS / 'idioms'}{os.pathsep}{os.environ['PYTHONPATH']}"
        argv = [*RUN, "--hosts", "h0:1,h1:1", "--nnodes", "1:2", *c.ssh_opts, *forward,
                "-x", f"PYTHONPATH={path}", str(SCRIPTS / "idioms" / IDIOMS[idiom][1])]  # fmt: skip
        proc = start_job(c, argv, log)
        until(lambda: _both_trained_and_saved(tmp_path), proc, log, timeout=200)
        ssh_of(proc, "h1").kill()
        code = wait_job(proc, log, 300)
        text = log.read_text()
        assert code == 0, text[-4000:]
        _check(tmp_path, text)
