"""Ending a benchmark's job for good: the launcher and every descendant (workers run in sessions of their own)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import psutil


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL `proc` and every process below it; the already gone are ignored."""
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for child in tree:
        with contextlib.suppress(psutil.Error):
            child.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
