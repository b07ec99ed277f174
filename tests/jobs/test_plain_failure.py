"""A plain script (no `import distrain`) that fails in init_process_group("nccl") on a CPU machine:
each rank's traceback once, whole and prefixed, from the script's own frame; the cause on the
launcher's last line; none of torch's agent log lines."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import REPO, python, run

SCRIPT = str(REPO / "tests" / "scripts" / "plain_nccl.py")


@pytest.mark.timeout(300)
@pytest.mark.skipif(torch.cuda.is_available(), reason="NCCL works here: the script would not fail")
def test_plain_script_failure_is_reported_once_per_rank() -> None:
    res = run([python(), "-m", "distrain.cli", "run", "-n", "2", SCRIPT], timeout=240)
    assert res.returncode == 1, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert re.fullmatch(
        r"distrain run: job failed: rank [01] \(pid \d+\) exited with code 1: ValueError: .*GPU.*",
        lines[-1],
    ), lines[-1]
    assert not any("failed (exitcode" in ln for ln in lines), res.stderr[-3000:]
    for rank in (0, 1):
        tag = f"[rank{rank}]: "
        block = [i for i, ln in enumerate(lines) if ln.startswith(tag)]
        assert block, res.stderr[-3000:]
        assert block == list(range(block[0], block[-1] + 1)), (
            f"rank {rank}'s traceback is interleaved:\n{res.stderr}"
        )
        text = [lines[i][len(tag) :] for i in block]
        assert text.count("Traceback (most recent call last):") == 1, "\n".join(text)
        assert "plain_nccl.py" in text[1], text[:3]  # the first frame is the user's script
        assert not any("runpy" in t or "forked.py" in t for t in text), "\n".join(text)
        assert text[-1].startswith("ValueError:"), text[-1]
