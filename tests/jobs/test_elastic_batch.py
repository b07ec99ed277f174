"""An elastic job with a per-process batch survives a change of world size, sample for sample.

Every tutorial fixes ``batch_size`` per process, so the global batch follows the world: 8 on 2
nodes, 4 on 1.  Real `distrain run` launchers in network namespaces (one "node" each); a node
is SIGKILLed whole (shrink) or a second one starts late (grow).  The job must go on from its
checkpoint at the next sample of the epoch: tests/scripts/elastic_samples.py logs what every rank
trained on, and tests/helpers/samples.py checks that each epoch saw its permutation in order,
every sample once, with the global batch changed in the middle of it.  ``--global-batch`` keeps
the global batch through accumulation instead.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, python
from helpers.netns_hosts import Hosts, make_hosts
from helpers.samples import batches_in_epoch, check_epochs, committed

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(400)]

SCRIPT = str(REPO / "tests" / "scripts" / "elastic_samples.py")
RUN = [python(), "-m", "distrain.cli", "run"]
SAMPLES, EPOCHS = 240, 2


def _flags(hosts: Hosts, run_id: str) -> list[str]:
    return ["--nnodes", f"1:{len(hosts.names)}", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"{hosts.addrs[0]}:29400", "--rdzv-id", run_id, "--rdzv-conf",
            "last_call_timeout=2,keep_alive_interval=2", "--max-restarts", "3",
            "--monitor-interval", "0.5", "-n", "1"]  # fmt: skip


def _argv(hosts: Hosts, run_id: str, tmp_path: Path, extra: list[str]) -> list[str]:
    return [*RUN, *_flags(hosts, run_id), SCRIPT, "--dir", str(tmp_path / "ckpt"),
            "--samples-log", str(tmp_path / "samples.jsonl"), "--samples", str(SAMPLES),
            "--epochs", str(EPOCHS), *extra]  # fmt: skip


def _until_trained(
    log: Path, world: int, steps: int, procs: list[subprocess.Popen[str]], logs: list[Path]
) -> None:
    """Wait until a start on `world` ranks made a checkpoint `steps` past where it resumed."""
    ckpt = log.parent / "ckpt"
    deadline = time.monotonic() + 200
    while True:
        if log.exists() and ckpt.exists():
            starts = committed(log)[1]
            saved = [int(p.name.split("_")[1]) for p in ckpt.glob("step_*")]
            if starts and starts[-1]["world"] == world and saved:
                if max(saved) >= starts[-1]["resumed"] + steps:
                    return
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail(
                "the job never got there\n" + "\n".join(x.read_text()[-3000:] for x in logs)
            )
        time.sleep(0.1)


#: per-process batch 4: a global batch of 8 on 2 nodes, 4 on 1; global_batch 8: kept at 8
CASES = {"per-process batch": ([], (8, 4)), "global_batch kept": (["--global-batch", "8"], (8, 8))}


@pytest.mark.parametrize("case", list(CASES))
def test_a_node_lost_mid_epoch_shrinks_the_world_and_no_sample_is_lost(
    case: str, hosts2: Hosts, tmp_path: Path
) -> None:
    extra, (before, after) = CASES[case]
    argv = _argv(hosts2, "shrink", tmp_path, extra)
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    procs = [hosts2.start(i, argv, logs[i]) for i in range(2)]
    samples = tmp_path / "samples.jsonl"
    _until_trained(samples, 2, 4, procs, logs)
    assert hosts2.kill_node(1)  # the machine dies: agent, worker, fork server
    codes = hosts2.wait([procs[0]], 300, logs)
    text = logs[0].read_text()
    assert codes == [0], text[-4000:]
    steps = check_epochs(samples, SAMPLES, EPOCHS)
    assert committed(samples)[1][-1]["world"] == 1, text[-4000:]
    changed = [e for e in range(EPOCHS) if len(batches_in_epoch(steps, e)) > 1]
    if before != after:  # the per-process batch: the global batch changed inside an epoch
        assert [batches_in_epoch(steps, e) for e in changed] == [[before, after]], steps
        said = re.search(
            rf"distrain: resumed at sample (\d+) of epoch 0 with global batch {after} "
            rf"\(was {before}: the world changed 2 → 1\)",
            text,
        )
    else:
        assert changed == [] and {s["global_batch"] for s in steps} == {8}
        said = re.search(
            r"distrain: resumed at sample (\d+) of epoch 0 with global batch 8 \(kept: the "
            r"world changed 2 → 1; 2 micro-batch\(es\) of 4 per process and step\)",
            text,
        )
    assert said, text[-4000:]
    assert int(said.group(1)) % before == 0 and int(said.group(1)) > 0


def test_a_node_that_comes_late_grows_the_world_at_the_next_sample(
    hosts2: Hosts, tmp_path: Path
) -> None:
    """1 → 2 with a per-process batch of 3: 6 per step from sample 3·k, not always a multiple
    of 6, so the grown world starts between two of its own global batches."""
    argv = _argv(hosts2, "grow", tmp_path, ["--batch-size", "3"])
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    first = hosts2.start(0, argv, logs[0])
    samples = tmp_path / "samples.jsonl"
    _until_trained(samples, 1, 3, [first], logs[:1])
    second = hosts2.start(1, argv, logs[1])
    codes = hosts2.wait([first, second], 300, logs)
    text = "\n".join(log.read_text() for log in logs)
    assert codes == [0, 0], text[-4000:]
    steps = check_epochs(samples, SAMPLES, EPOCHS)
    starts = committed(samples)[1]
    assert [s["world"] for s in starts][:1] == [1] and starts[-1]["world"] == 2, starts
    assert batches_in_epoch(steps, 0) == [3, 6], steps
    assert re.search(
        r"distrain: resumed at sample \d+ of epoch 0 with global batch 6 \(was 3: the world "
        r"changed 1 → 2\)",
        text,
    ), text[-4000:]


def test_a_third_node_grows_the_world_from_2_to_3(tmp_path: Path) -> None:
    """2 → 3 (`--nnodes 1:3`) with a per-process batch of 4: 8 per step, then 12 from a
    position that is a multiple of 8, often not of 12."""
    with make_hosts(3) as hosts:
        argv = _argv(hosts, "grow3", tmp_path, [])
        logs = [tmp_path / f"node{i}.log" for i in range(3)]
        procs = [hosts.start(i, argv, logs[i]) for i in range(2)]
        samples = tmp_path / "samples.jsonl"
        _until_trained(samples, 2, 3, procs, logs[:2])
        procs.append(hosts.start(2, argv, logs[2]))
        codes = hosts.wait(procs, 300, logs)
        text = "\n".join(log.read_text() for log in logs)
        assert codes == [0, 0, 0], text[-4000:]
        steps = check_epochs(samples, SAMPLES, EPOCHS)
        assert committed(samples)[1][-1]["world"] == 3
        sizes = [s["global_batch"] for s in steps]
        changes = list(zip(sizes, sizes[1:], strict=False))
        assert (8, 12) in changes, steps  # in an epoch or at its start: the node's start decides
        assert re.search(
            r"distrain: resumed at sample \d+ of epoch \d with global batch 12 \(was 8: the world "
            r"changed 2 → 3\)",
            text,
        ), text[-4000:]


def _steps_seen(log: Path, world: int, steps: int, procs: list[subprocess.Popen[str]]) -> None:
    """Wait until the last start, on `world` ranks, trained `steps` steps."""
    deadline = time.monotonic() + 200
    while not (
        log.exists()
        and (seen := committed(log))[1]
        and seen[1][-1]["world"] == world
        and seen[0]
        and seen[0][-1]["step"] >= seen[1][-1]["resumed"] + steps
    ):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail("the job never got there")
        time.sleep(0.1)


MEMORY_ONLY = ["--every", "1000", "--memory-every", "1", "--momentum", "0.9"]


def _memory_roots(tmp_path: Path) -> list[Path]:
    return [Path("/dev/shm") / f"dtest-reworld-{tmp_path.name}-node{i}" for i in (0, 1)]


def _resumed_from_memory(samples: Path, world: int, text: str) -> int:
    """Check the last start: on `world` ranks, at most one step back, every rank with the state
    the job had at that step (model and momentum, sha256), said; returns its step."""
    check_epochs(samples, SAMPLES, EPOCHS)
    entries = [json.loads(line) for line in samples.read_text().splitlines()]
    header = max(i for i, e in enumerate(entries) if "resumed" in e)
    resumed, trained = entries[header], [e for e in entries[:header] if "step" in e]
    assert resumed["world"] == world and resumed["resumed"] > 0, resumed
    assert trained[-1]["step"] - resumed["resumed"] <= 1, (trained[-1], resumed)
    at = [e["state"] for e in trained if e["step"] == resumed["resumed"]]
    assert at and resumed["states"] == at[-1:] * world, (at, resumed)
    assert re.search(
        rf"distrain: resumed from memory, old rank \d's snapshot of step {resumed['resumed']} "
        rf"\(saved on {3 - world} ranks\)",
        text,
    ), text[-4000:]
    return int(resumed["resumed"])


def _left(roots: list[Path]) -> list[str]:
    return sorted(str(p) for root in roots for p in root.rglob("*"))


def test_a_node_lost_with_its_memory_resumes_the_smaller_world_from_memory(
    hosts2: Hosts, tmp_path: Path
) -> None:
    """The memory tier across world sizes: snapshots every step, no disk checkpoint in reach;
    node 1 dies and its tmpfs with it.  The survivor resumes on 1 rank from a snapshot taken on
    2 (its own, or the copy of node 1's rank 0 it keeps), losing at most one step, with the state
    it had at that step bit for bit (model and momentum) and every sample trained once."""
    roots = _memory_roots(tmp_path)
    try:
        argv = _argv(hosts2, "memshrink", tmp_path, MEMORY_ONLY)
        logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
        env = [{"DISTRAIN_MEMORY_DIR": str(root)} for root in roots]
        procs = [hosts2.start(i, argv, logs[i], env=env[i]) for i in range(2)]
        samples = tmp_path / "samples.jsonl"
        _steps_seen(samples, 2, 6, procs)
        assert hosts2.kill_node(1)
        shutil.rmtree(roots[1], ignore_errors=True)  # the machine is gone, its memory too
        codes = hosts2.wait([procs[0]], 300, logs)
        text = logs[0].read_text()
        assert codes == [0], text[-4000:]
        _resumed_from_memory(samples, 1, text)
        assert _left(roots) == []  # the old world's snapshots too: nothing after a good end
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def test_a_rerun_on_more_nodes_sends_the_memory_snapshot_to_the_new_one(
    hosts2: Hosts, tmp_path: Path
) -> None:
    """A job on 1 node dies whole (its launcher SIGKILLed, its tmpfs kept); the user reruns it on
    2.  The new node holds no snapshot and receives the one taken on 1 rank over the tier's gloo
    group; both ranks resume with that step's state, and the rank with no old snapshot of its
    own says it keeps its RNG state."""
    roots = _memory_roots(tmp_path)
    try:
        argv = _argv(hosts2, "memgrow", tmp_path, MEMORY_ONLY)
        logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
        env = [{"DISTRAIN_MEMORY_DIR": str(root)} for root in roots]
        first = hosts2.start(0, argv, logs[0], env=env[0])
        samples = tmp_path / "samples.jsonl"
        _steps_seen(samples, 1, 4, [first])
        assert hosts2.kill_node(0)
        first.wait(60)
        logs = [tmp_path / "rerun0.log", tmp_path / "rerun1.log"]
        procs = [hosts2.start(i, argv, logs[i], env=env[i]) for i in range(2)]
        codes = hosts2.wait(procs, 300, logs)
        text = "\n".join(log.read_text() for log in logs)
        assert codes == [0, 0], text[-4000:]
        step = _resumed_from_memory(samples, 2, text)
        assert re.search(
            rf"rank 1: no memory snapshot of its own at step {step} on this node \(saved on 1 "
            r"ranks\): this rank keeps its own RNG state",
            text,
        ), text[-4000:]
        assert _left(roots) == []
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
