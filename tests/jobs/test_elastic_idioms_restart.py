"""Modes × idioms, the elastic column for the idioms that keep no distrain checkpoint.

The script's own DistributedSampler, a plain torchrun script, ``init_device_mesh``, Accelerate,
Lightning's Trainer and Fabric save nothing distrain can resume: when an elastic job
(`--nnodes 1:2`, two network namespaces, one rank each) loses a node mid-run, torch's agent
starts the survivor's rank again, on a world of 1, from step 0, as torchrun does.  Works means:
the survivor finishes every step, and its parameters equal, bit for bit, the script run by its
own launcher on one process (`torchrun --nproc-per-node 1`).  The `--hosts` column: the same
job as one `distrain run --hosts` over real ssh (helpers/ssh_cluster.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from helpers import SCRIPTS, python, run
from helpers.compat import IDIOMS, compat, run_idiom
from helpers.netns_hosts import Hosts
from helpers.session import once
from helpers.ssh_cluster import ssh_cluster, ssh_of, start_job, until, wait_job

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(400)]

STEPS = "30"
RESTARTING = ["own_sampler", "torchrun_plain", "device_mesh", "accelerate", "lightning", "fabric"]
TORCHRUN_1 = [python(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]


def _reference(idiom: str, factory: pytest.TempPathFactory) -> str:
    """The digest of the idiom's script run by torchrun on one process: the lost-node and the
    lost-host cells of an idiom compare with the same run, made once per test run."""

    def make(folder: Path) -> str:
        result, finals = run_idiom(TORCHRUN_1, idiom, folder, env={"IDIOM_STEPS": STEPS})
        assert len(finals) == 1, result.stderr[-3000:]
        return str(finals[0]["digest"])

    return once(factory, f"elastic-restart-ref-{idiom}-{STEPS}", make)


def _env(out: Path) -> dict[str, str]:
    """The idiom's settings (slow steps: the node dies mid-run) and where it finds idiom_common."""
    path = f"{SCRIPTS / 'idioms'}{os.pathsep}{os.environ['PYTHONPATH']}"
    return {
        "IDIOM_OUT": str(out),
        "IDIOM_STEPS": STEPS,
        "IDIOM_STEP_SLEEP": "0.2",
        "PYTHONPATH": path,
    }


@pytest.mark.parametrize("idiom", [pytest.param(i, marks=compat("elastic", i)) for i in RESTARTING])
def test_a_lost_node_restarts_the_survivor_from_the_start(
    idiom: str, hosts2: Hosts, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference = _reference(idiom, tmp_path_factory)
    out = tmp_path / "out"
    flags = ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"{hosts2.addrs[0]}:29400", "--rdzv-id", idiom, "--rdzv-conf",
             "last_call_timeout=2,keep_alive_interval=2", "--max-restarts", "3",
             "-n", "1"]  # fmt: skip
    argv = [
        python(),
        "-m",
        "distrain.cli",
        "run",
        *flags,
        str(SCRIPTS / "idioms" / IDIOMS[idiom][1]),
    ]
    env = _env(out)
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [hosts2.start(i, argv, logs[i], env=env) for i in range(2)]
    deadline = time.monotonic() + 200
    while not any(len(p.read_text().splitlines()) >= 3 for p in out.glob("samples.1.*")):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail("\n".join(log.read_text()[-3000:] for log in logs))
        time.sleep(0.1)
    assert hosts2.kill_node(1)  # rank 1 trained 3 steps on a world of 2: the node dies
    codes = hosts2.wait([procs[0]], 300, logs)
    text = logs[0].read_text()
    assert codes == [0], text[-4000:]
    got = [json.loads(p.read_text()) for p in out.glob("final.*.json")]
    assert [(f["world"], f["steps"]) for f in got] == [(1, int(STEPS))], text[-4000:]
    assert got[0]["digest"] == reference, text[-4000:]


@pytest.mark.parametrize("idiom", [pytest.param(i, marks=compat("hosts", i)) for i in RESTARTING])
def test_a_lost_host_restarts_the_survivor_from_the_start(
    idiom: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same through `--hosts h0:1,h1:1 --nnodes 1:2`: h1's ssh session is SIGKILLed."""
    reference = _reference(idiom, tmp_path_factory)
    out = tmp_path / "out"
    with ssh_cluster(2, tmp_path) as c:
        log = tmp_path / "job.log"
        forward = [a for k, v in _env(out).items() for a in ("-x", f"{k}={v}")]
        argv = [python(), "-m", "distrain.cli", "run", "--hosts", "h0:1,h1:1", "--nnodes", "1:2",
                *c.ssh_opts, *forward, str(SCRIPTS / "idioms" / IDIOMS[idiom][1])]  # fmt: skip
        proc = start_job(c, argv, log)
        until(
            lambda: any(len(p.read_text().splitlines()) >= 3 for p in out.glob("samples.1.*")),
            proc,
            log,
            timeout=200,
        )
        ssh_of(proc, "h1").kill()
        code = wait_job(proc, log, 300)
        text = log.read_text()
        assert code == 0, text[-4000:]
    got = [json.loads(p.read_text()) for p in out.glob("final.*.json")]
    assert [(f["world"], f["steps"]) for f in got] == [(1, int(STEPS))], text[-4000:]
    assert got[0]["digest"] == reference, text[-4000:]


REFUSAL = "every node would start a job of its own"


@pytest.mark.parametrize(
    "idiom",
    [pytest.param("self_start", marks=compat("elastic", "self_start", "refused", why=REFUSAL))],
)
def test_a_self_starting_script_on_two_nodes_is_refused_at_start(
    idiom: str, tmp_path: Path
) -> None:
    """Each node would run the script once and its `mp.spawn` children form a job of their own
    (probed: node 0's pair finished alone, node 1's failed, the job never ended): refused."""
    argv = [python(), "-m", "distrain.cli", "run", "--nnodes", "1:2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "127.0.0.1:29999", "--rdzv-id", "selfstart", "-n", "1",
            str(SCRIPTS / "idioms" / IDIOMS[idiom][1])]  # fmt: skip
    result = run(argv, timeout=120, env=_env(tmp_path / "out"))
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if REFUSAL in line]
    assert len(said) == 1 and "self_start.py starts its own workers" in said[0], result.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize(
    "idiom",
    [pytest.param("self_start", marks=compat("hosts", "self_start", "refused", why=REFUSAL))],
)
def test_a_self_starting_script_on_two_hosts_is_refused_at_start(
    idiom: str, tmp_path: Path
) -> None:
    with ssh_cluster(2, tmp_path) as c:
        log = tmp_path / "job.log"
        forward = [a for k, v in _env(tmp_path / "out").items() for a in ("-x", f"{k}={v}")]
        argv = [python(), "-m", "distrain.cli", "run", "--hosts", "h0:1,h1:1", "--nnodes", "1:2",
                *c.ssh_opts, *forward, str(SCRIPTS / "idioms" / IDIOMS[idiom][1])]  # fmt: skip
        proc = start_job(c, argv, log)
        code = wait_job(proc, log, 120)
        text = log.read_text()
        assert code != 0, text[-3000:]
        last = text.strip().splitlines()[-1]
        assert REFUSAL in last and "self_start.py starts its own workers" in last, text[-3000:]
        assert not (tmp_path / "out").exists()
