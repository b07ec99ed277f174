"""Environment for a job with injected faults: tests/inject/sitecustomize.py first on PYTHONPATH."""

from __future__ import annotations

import os
from pathlib import Path

INJECT = Path(__file__).resolve().parents[1] / "inject"


def fault_env(**variables: str) -> dict[str, str]:
    """`variables` (DTEST_FAULT_* names, see tests/inject/sitecustomize.py) plus the PYTHONPATH that loads the injector."""
    path = os.pathsep.join(
        [str(INJECT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    )
    return {"PYTHONPATH": path, **variables}
