"""Environment for a job with injected faults: tests/inject/sitecustomize.py first on PYTHONPATH."""

from __future__ import annotations

import os
from pathlib import Path

INJECT = Path(__file__).resolve().parents[1] / "inject"


def fault_env(**variables: str) -> dict[str, str]:
    """`variables` (DTEST_FAULT_*: tests/inject/sitecustomize.py) plus the injector's PYTHONPATH."""
    path = os.pathsep.join(
        [str(INJECT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    )
    return {"PYTHONPATH": path, **variables}
