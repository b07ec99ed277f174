"""A process killed in the middle of ``torch.save`` under distrain leaves a file that loads
(worker/atomic_save.py): real SIGKILLs of a real process saving in a loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

#: saves a 16 MB snapshot in place, over and over, through the wrapper or torch's own save
WRITER = """
import sys, torch
from distrain.worker.atomic_save import atomic
save = atomic(torch.serialization.save) if sys.argv[2] == "atomic" else torch.save
big = torch.randn(4 * 1024 * 1024)
i = 0
while True:
    i += 1
    save({"i": i, "big": big}, sys.argv[1])
    if i == 1:
        print("saved", flush=True)
"""


def test_a_process_killed_mid_save_leaves_a_loadable_file(tmp_path: Path) -> None:
    """Real SIGKILLs at spread-out moments of a loop of saves; the file always loads."""
    path = tmp_path / "snapshot.pt"
    for delay in (0.05, 0.13, 0.21, 0.37, 0.5):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "atomic"],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "saved"
            subprocess.run(["sleep", str(delay)], check=True)
        finally:
            proc.kill()
            proc.wait(timeout=60)
        state = torch.load(path, weights_only=True)
        assert state["i"] >= 1 and state["big"].numel() == 4 * 1024 * 1024
