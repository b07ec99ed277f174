"""Pure functions: SLURM host lists, the global batch sampler, argv handling, thread policy."""

from __future__ import annotations

import pytest

from distrain.cluster import (
    SLURMEnvironment,
    detect_environment,
    expand_nodelist,
    pop_local_rank_arg,
)
from distrain.launch.plan import split_argv
from distrain.runtime.threads import choose_threads
from distrain.train.data import GlobalBatchSampler, ShardedEvalSampler


def test_expand_nodelist() -> None:
    assert expand_nodelist("node[01-04,07]") == ["node01", "node02", "node03", "node04", "node07"]
    assert expand_nodelist("a1,b[2-3],c") == ["a1", "b2", "b3", "c"]
    assert expand_nodelist("gpu[1-2]-ib[0,1]") == ["gpu1-ib0", "gpu1-ib1", "gpu2-ib0", "gpu2-ib1"]
    assert expand_nodelist("host") == ["host"]


def test_slurm_master_from_nodelist(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
           "SLURM_NNODES": "4", "SLURM_NODELIST": "node[07-09,11]", "SLURM_JOB_ID": "123456",
           "SLURM_JOB_NAME": "train", "SLURM_TASKS_PER_NODE": "2(x4)"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    detected = detect_environment()
    assert isinstance(detected, SLURMEnvironment)
    assert (detected.rank(), detected.world_size(), detected.local_rank(), detected.local_world_size()) == (5, 8, 1, 2)
    assert detected.node_rank() == 2 and detected.num_nodes() == 4
    assert detected.master_addr() == "node07"
    assert detected.master_port() == 15000 + 123456 % 20000
    with pytest.raises(Exception, match="ntasks-per-node=4"):
        detected.check_devices(4)
    detected.check_devices(2)


def test_slurm_interactive_shell_is_not_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")
    assert not SLURMEnvironment.detect()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_global_batches_do_not_depend_on_world_size(world: int) -> None:
    reference = [b for b in GlobalBatchSampler(120, 12, shuffle=True, seed=4)]
    per_rank = [list(GlobalBatchSampler(120, 12 // world, rank=r, world_size=world, seed=4)) for r in range(world)]
    merged = [sum((per_rank[r][step] for r in range(world)), []) for step in range(len(reference))]
    assert merged == reference


def test_sampler_drops_short_last_batch_and_resumes() -> None:
    samplers = [GlobalBatchSampler(10, 2, rank=r, world_size=2, shuffle=False) for r in range(2)]
    steps = [list(s) for s in samplers]
    assert len(steps[0]) == len(steps[1]) == 2  # 10 samples, global batch 4: 4 + 4, 2 dropped
    seen = sorted(i for s in steps for b in s for i in b)
    assert seen == list(range(8))
    with pytest.raises(ValueError, match="fewer than one global batch"):
        GlobalBatchSampler(10, 6, world_size=2)
    with pytest.raises(ValueError, match="drop_last=False"):
        GlobalBatchSampler(10, 2, drop_last=False)
    samplers[0].set_epoch(0, start_step=1)
    assert list(samplers[0]) == steps[0][1:]
    s = GlobalBatchSampler(10, 2, shuffle=True, seed=1)
    s.set_epoch(1)
    other = list(s)
    s.set_epoch(0)
    assert list(s) != other, "epochs must reshuffle"


def test_eval_shards_cover_each_sample_once() -> None:
    for world in (1, 2, 3, 7):
        got = sorted(i for r in range(world) for i in ShardedEvalSampler(359, r, world))
        assert got == list(range(359))


def test_pop_local_rank_arg() -> None:
    argv = ["train.py", "--local-rank=3", "--lr", "1"]
    assert pop_local_rank_arg(argv) == 3 and argv == ["train.py", "--lr", "1"]
    argv = ["train.py", "--local_rank", "2"]
    assert pop_local_rank_arg(argv) == 2 and argv == ["train.py"]
    assert pop_local_rank_arg(["train.py", "--lr", "1"]) is None


def test_split_argv_keeps_script_args() -> None:
    options = {"-n": True, "--nnodes": True, "--standalone": False}
    assert split_argv(["-n", "2", "--standalone", "t.py", "--n", "5"], options) == (["-n", "2", "--standalone"], ["t.py", "--n", "5"])
    assert split_argv(["--nnodes=1", "t.py"], options) == (["--nnodes=1"], ["t.py"])


def test_thread_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISTRAIN_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun's blanket default: not a choice
    monkeypatch.setattr("distrain.contract.usable_cores", lambda: 64)
    assert choose_threads(2) == 32
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert choose_threads(2) == 4
    assert choose_threads(2, requested=3) == 3
