"""gloo + DDP/FSDP can hang or abort at exit: a 2-rank job must exit with its group gone.

An exit abort ("terminate called without an active exception") is rare (about 2 suite runs in 10 had
one rank of ~100 jobs abort), so a count of jobs cannot catch it.  Its cause can be seen every time:
the group's native threads (gloo's loops, rank 0's store) still alive after distrain's exit handler,
because something still references the group (torch.distributed.nn's `group=group.WORLD` defaults
when imported after the group formed; FSDP's device mesh held by the optimizer's parameters; the
checkpointer's DCP group held by the script's checkpointer).  Each job prints those threads at its
very end; any left fails the test, and so does an exit that hangs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, distrain_run, held_port, python

SCRIPT = str(REPO / "tests" / "scripts" / "exit_job.py")

pytestmark = pytest.mark.slow


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("strategy", "bound_s"), [("ddp", 90), ("fsdp", 240)])
def test_job_exits_with_its_group_gone(strategy: str, bound_s: int, tmp_path: Path) -> None:
    """A 2-rank DDP (or FSDP: its groups are released too) job exits cleanly, no group thread left.

    FSDP's first use imports torch._dynamo: on a loaded 2-core machine a job took > 150 s to
    reach training, hence its longer bound (a deadlock still never ends)."""
    port = held_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [python(), SCRIPT, strategy, str(tmp_path / "ckpt")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    try:
        outs = [p.communicate(timeout=bound_s)[0] for p in procs]
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"the {strategy} job did not exit within {bound_s} s (exit deadlock)"
        ) from None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    for rank, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"{strategy} rank {rank}: exit {p.returncode}\n{out}"
        assert f"trained {rank}" in out
        assert "terminate called" not in out
        # rank 0 hosts the store here (no launcher agent): its thread must be gone too
        assert "group threads at exit: []" in out, (
            f"{strategy} rank {rank}: the group outlived shutdown\n{out}"
        )


@pytest.mark.timeout(200)
def test_a_group_a_hook_callback_frees_last_is_dropped_on_the_main_thread() -> None:
    """A comm hook's callback freed on gloo's thread after shutdown must not free the group there.

    Without distrain waiting for it, the group's destructor joins its threads from one of them
    and the rank aborts: "terminate called after throwing ... Resource deadlock avoided"."""
    script = str(REPO / "tests" / "scripts" / "hook_frees_group_late.py")
    res = distrain_run("-n", "2", script, timeout=180, env={"DISTRAIN_DEVICE": ""})
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "terminate called" not in out, out
    for rank in range(2):
        assert f"ended {rank}" in res.stdout, out
    assert res.stdout.count("group threads at exit: []") == 2, out
