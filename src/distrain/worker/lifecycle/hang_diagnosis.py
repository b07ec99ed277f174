"""Which rank a hang is about: where each rank's main thread is, and the watchdog's choice.

Each heartbeat carries where its rank's main thread is (the user's innermost frame, and whether
it is inside torch); :func:`diagnose` picks the rank the others wait for (lifecycle/watchdog.py).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from distrain.worker.lifecycle.stop_job import FROZEN

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_DISTRAIN_DIR = str(Path(__file__).resolve().parent.parent)


def main_thread_where() -> tuple[str, bool]:
    """("file:line in func" of the user's innermost frame, whether the main thread is in torch)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None:
        return "?", False
    in_torch = frame.f_code.co_filename.startswith(_TORCH_DIR)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    walk: Any = frame
    while walk is not None:
        name = walk.f_code.co_filename
        if not name.startswith((_TORCH_DIR, _DISTRAIN_DIR)) and not name.startswith("<"):
            where = f"{os.path.basename(name)}:{walk.f_lineno} in {walk.f_code.co_name}"
            break
        walk = walk.f_back
    return where, in_torch


def diagnose(
    beats: dict[int, dict[str, Any]], silent: set[int], world_size: int
) -> tuple[list[int], str]:
    """Which ranks are stuck, and why, from every rank's last heartbeat.

    `silent` are ranks whose heartbeat stopped changing (their process is frozen or gone).  Among
    the others, the ranks furthest behind that are not waiting inside torch are the stuck ones:
    a rank blocked in a collective is waiting *for* someone.
    """
    missing = [r for r in range(world_size) if r not in beats]
    dead = sorted(set(silent) | set(missing))
    alive = {r: b for r, b in beats.items() if r not in dead}
    if alive:
        low = min(int(b["step"]) for b in alive.values())
        behind = sorted(r for r, b in alive.items() if int(b["step"]) == low)
        outside = [r for r in behind if not _in_torch(alive[r])]
    else:
        behind, outside = [], []
    if dead:
        return dead, f"stopped answering (process {FROZEN})"
    if world_size == 1:  # nobody waits for a lone rank: say where it is stuck, not who waits
        return (
            behind,
            "is stuck outside torch (its own code)" if outside else "is stuck inside torch",
        )
    if outside:
        return outside, "is not in a collective while the others wait for it" if len(
            outside
        ) == 1 else "are not in a collective while the others wait"
    return behind, "all wait inside torch (a collective only some ranks called?)"


def _in_torch(beat: dict[str, Any]) -> bool:
    """True when that heartbeat says the rank's main thread was inside torch."""
    return bool(beat.get("in_torch"))
