"""Story 12: FSDP2 sharding — equal to one process, accumulation, clipping, meta init, HSDP.

Real gloo jobs of 2 and 4 ranks train a tiny float64 net (tests/scripts/fsdp_job.py) and are
compared with one plain process training the same global batch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import REPO, distrain_run, python, run, session

JOB = str(REPO / "tests" / "scripts" / "fsdp_job.py")
TWO_RANK_RUNS = ("ddp-meta", "fsdp-meta", "fsdp-accum", "fsdp-seeded", "fsdp-ac", "hsdp-one-node")

pytestmark = pytest.mark.timeout(600)


def launch(out: Path, world: int, *runs: str) -> None:
    if world > 1:
        distrain_run("-n", str(world), JOB, "--out", str(out), *runs, timeout=400, check=True)
    else:
        run([python(), JOB, "--out", str(out), *runs], timeout=400, check=True)


def results(out: Path, name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / name).glob("rank*.json"))]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plain process (the reference) and one 2-rank job running every 2-rank configuration,
    made once per test run (a module fixture is made once per xdist worker)."""

    def make(out: Path) -> str:
        launch(out, 1, "plain")
        launch(out, 2, *TWO_RANK_RUNS)
        return str(out)

    return Path(session.once(tmp_path_factory, "sharding-jobs", make))


def assert_states_close(got: dict, want: dict, atol: float) -> None:
    assert list(got) == list(want)
    for key in want:
        torch.testing.assert_close(
            torch.tensor(got[key]), torch.tensor(want[key]), rtol=0, atol=atol, msg=key
        )


def test_fsdp_two_ranks_equals_one_process(jobs: Path) -> None:
    """Sharded over 2 ranks (batch 6 each) == one process with batch 12, to 1e-9 in float64."""
    ref = results(jobs, "plain")[0]
    rank0, rank1 = results(jobs, "fsdp-meta")
    total = sum(torch.tensor(v).numel() for v in ref["final"].values())
    assert (
        rank0["local_numel"] < 0.6 * total and rank1["local_numel"] < 0.6 * total
    )  # really sharded
    assert_states_close(rank0["final"], ref["final"], atol=1e-9)
    assert rank0["unwrap_is_net"]


def test_clip_grad_norm_is_the_global_norm(jobs: Path) -> None:
    """ctx.clip_grad_norm over sharded gradients returns (and clips to) the unsharded norm."""
    ref = results(jobs, "plain")[0]
    assert min(ref["norms"]) > 0.3  # clipping was active at every step
    for res in results(jobs, "fsdp-meta"):
        torch.testing.assert_close(
            torch.tensor(res["norms"]), torch.tensor(ref["norms"]), rtol=1e-9, atol=0
        )


def test_accumulation_under_fsdp_skips_reduction(jobs: Path) -> None:
    """3 micro-steps of 2 per rank == one step of 12; only each third backward reduce-scatters."""
    ref = results(jobs, "plain")[0]
    accum = results(jobs, "fsdp-accum")
    assert_states_close(accum[0]["final"], ref["final"], atol=1e-9)
    for res in accum:
        counts = res["reduce_scatters"]
        assert len(counts) == 12
        assert [c for i, c in enumerate(counts) if i % 3 != 2] == [0] * 8
        assert all(c > 0 for i, c in enumerate(counts) if i % 3 == 2)
    unaccumulated = results(jobs, "fsdp-meta")[0]["reduce_scatters"]
    assert all(c > 0 for c in unaccumulated)  # the counter sees FSDP's reductions at all


def test_init_model_equals_one_process_init(jobs: Path) -> None:
    """Built on meta and materialised (sharded or DDP): bitwise the weights one process draws.

    The FSDP ranks are seeded differently (seed + rank): rank 0's generator state is used.
    """
    ref = results(jobs, "plain")[0]
    for name in ("fsdp-meta", "ddp-meta"):
        rank0 = results(jobs, name)[0]
        assert rank0["built_on_meta"]
        assert rank0["initial"] == ref["initial"], name
    # ranks seeded differently, not meta: prepare_model makes rank 0's weights everyone's
    assert results(jobs, "fsdp-seeded")[0]["initial"] == ref["initial"]
    assert_states_close(results(jobs, "fsdp-seeded")[0]["final"], ref["final"], atol=1e-9)


def test_strategy_object_options_reach_fully_shard(jobs: Path) -> None:
    """fsdp-seeded passes distrain.FSDP(reshard_after_forward=False): backward gathers nothing again

    Were the object's option dropped on the way to fully_shard, it would gather as often as the
    "fsdp" run (each unit again in backward); its training equals one process (tested above).
    """
    kept = [r["all_gathers"] for r in results(jobs, "fsdp-seeded")]
    resharded = [r["all_gathers"] for r in results(jobs, "fsdp-meta")]
    assert all(0 < k < r for k, r in zip(kept, resharded, strict=True)), (kept, resharded)


def test_activation_checkpointing_under_fsdp(jobs: Path) -> None:
    """Each block recomputed in backward (checkpoint_wrapper, then sharded): same training."""
    ref = results(jobs, "plain")[0]
    rank0 = results(jobs, "fsdp-ac")[0]
    assert rank0["checkpointed_blocks"] == 5  # 3 Blocks, 2 nn.TransformerEncoderLayers
    assert_states_close(rank0["final"], ref["final"], atol=1e-9)


def test_full_state_dict_on_rank0_only(jobs: Path) -> None:
    """ctx.full_state_dict: every key, full shapes on rank 0; {} on the others (FSDP and DDP)."""
    ref = results(jobs, "plain")[0]
    for name in ("fsdp-meta", "ddp-meta"):
        rank0, rank1 = results(jobs, name)
        assert {k: torch.tensor(v).shape for k, v in rank0["final"].items()} == {
            k: torch.tensor(v).shape for k, v in ref["final"].items()
        }
        assert rank1["final"] == {} and rank1["initial"] == {}


def test_hsdp_two_replicas_of_two_shards(jobs: Path, tmp_path: Path) -> None:
    """4 processes as 2 replicas x 2 shards: equal to one process, each rank holding half."""
    launch(tmp_path, 4, "hsdp")
    ref = results(jobs, "plain")[0]
    ranks = results(tmp_path, "hsdp")
    assert len(ranks) == 4
    total = sum(torch.tensor(v).numel() for v in ref["final"].values())
    assert all(r["local_numel"] < 0.6 * total for r in ranks)
    assert_states_close(ranks[0]["final"], ref["final"], atol=1e-9)
    torch.testing.assert_close(
        torch.tensor(ranks[3]["norms"]), torch.tensor(ref["norms"]), rtol=1e-9, atol=0
    )


def test_hsdp_defaults_to_one_replica_per_node(jobs: Path) -> None:
    """On one node, hsdp without replicate= is 1 replica x 2 shards, and trains like one process."""
    ref = results(jobs, "plain")[0]
    rank0 = results(jobs, "hsdp-one-node")[0]
    total = sum(torch.tensor(v).numel() for v in ref["final"].values())
    assert rank0["local_numel"] < 0.6 * total
    assert_states_close(rank0["final"], ref["final"], atol=1e-9)


SYNC_BN = """
import torch, distrain
ctx = distrain.init(verbose=False)
model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
ctx.prepare_model(model, strategy="fsdp", sync_bn=True)
print("not refused")
"""


def test_sync_bn_refused_under_fsdp(tmp_path: Path) -> None:
    script = tmp_path / "syncbn.py"
    script.write_text(SYNC_BN)
    res = run([python(), "-m", "distrain.cli", "run", "-n", "2", str(script)], timeout=300)
    assert res.returncode != 0
    assert "not refused" not in res.stdout
    lines = [
        ln
        for ln in res.stderr.splitlines()
        if "sync_bn=True cannot be used with strategy='fsdp'" in ln
    ]
    assert lines, res.stderr[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-2000:]


def test_train_gpt_example_under_fsdp(tmp_path: Path) -> None:
    """examples/train_gpt.py trains a few steps sharded on 2 ranks, with the monitor and the
    watchdog on, and saves the full model."""
    run_dir = tmp_path / "run"
    cmd = [
        python(),
        "-m",
        "distrain.cli",
        "run",
        "-n",
        "2",
        "--run-dir",
        str(run_dir),
        str(REPO / "examples" / "train_gpt.py"),
        "--strategy",
        "fsdp",
        "--steps",
        "8",
        "--log-every",
        "4",
        "--batch-size",
        "2",
        "--block-size",
        "32",
        "--out",
        str(tmp_path),
    ]
    res = run(
        cmd,
        timeout=400,
        check=True,
        env={"DISTRAIN_METRICS_INTERVAL": "0.2", "DISTRAIN_WATCHDOG": "300"},
    )
    assert "strategy fsdp" in res.stdout
    losses = [
        float(line.split("loss ")[1].split()[0])
        for line in res.stdout.splitlines()
        if line.startswith("step ")
    ]
    assert len(losses) == 2 and losses[1] < losses[0] < 6.0, res.stdout
    assert "validation loss" in res.stdout
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state["blocks.0.qkv.weight"].shape == (384, 128)  # whole, not a shard
    assert type(state["head.weight"]) is torch.Tensor
    assert len(state) == 5 + 4 * 12  # tok, pos, ln_f (2), head; 12 tensors per block
    for rank in (0, 1):  # the monitor saw every step, with the example's values
        records = [
            json.loads(line)
            for line in (run_dir / "metrics" / f"rank-{rank}.jsonl").read_text().splitlines()
            if line.strip()
        ]
        assert records[-1]["event"] == "end" and records[-1]["step"] == 8, records[-1]
        assert {"loss", "grad_norm"} <= set(records[-1]["values"])
