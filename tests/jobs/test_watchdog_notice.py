"""`distrain run --watchdog` on a script that never calls distrain.init() says so in one line.

A script that does call it is watched silently: asserted on test_watchdog.py's resumed job (a
job of its own here before).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SCRIPTS, distrain_run

SCRIPT = str(SCRIPTS / "signal_job.py")
NOTICE = "distrain run: warning: --watchdog watches scripts that call distrain.init(); "


def _job(out: Path, *script_flags: str) -> tuple[int, str]:
    (out / "signalled").touch()  # train 20 steps and end
    res = distrain_run("-n", "2", "--watchdog", "30", SCRIPT, str(out), *script_flags, timeout=150)
    return res.returncode, res.stderr


@pytest.mark.timeout(200)
def test_plain_script_is_named_as_unwatched(tmp_path: Path) -> None:
    code, err = _job(tmp_path, "--plain")
    assert code == 0, err[-3000:]
    notices = [line for line in err.splitlines() if line.startswith(NOTICE)]
    assert notices == [NOTICE + "signal_job.py did not, so nothing was watched"], err[-3000:]
