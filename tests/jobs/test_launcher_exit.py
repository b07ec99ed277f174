"""How `distrain run` itself ends: its exit handlers run, the interpreter's teardown does not.

A launcher that ran torch's agent holds ~200 000 objects; the interpreter's last collection and
module teardown took a median 2.9 s on 2 loaded cores after the end lines were out, and whatever
runs next waited for it (benchmarks/chaos/RESULTS.md, "The launcher's exit").
`distrain.cli.end_now` runs the exit handlers, flushes and leaves.  A ``sitecustomize`` put on
the launcher's path marks what ran: an atexit handler, and an object whose ``__del__`` only the
teardown of its module calls.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import distrain_run

_SITE = """
import atexit, os, sys

_MARKS = os.environ["EXIT_MARKS"]


def _mark(what):
    with open(_MARKS, "a") as f:
        f.write(f"{what} {os.getpid()}\\n")


class _Teardown:
    # what it calls is bound now: the teardown may have emptied the builtins by the time it runs
    def __del__(self, _open=open, _pid=os.getpid, _marks=_MARKS):
        with _open(_marks, "a") as f:
            f.write(f"teardown {_pid()}\\n")


if sys.orig_argv[1:4] == ["-m", "distrain.cli", "run"]:  # the launcher, not a spawned rank
    _mark("launcher")
    atexit.register(_mark, "atexit")
    _held = _Teardown()
"""

_SCRIPT = """
import os, sys
print(f"rank {os.environ['RANK']} ends with {sys.argv[1]}", flush=True)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 3])
def test_the_launcher_runs_its_exit_handlers_and_skips_the_teardown(
    tmp_path: Path, code: int
) -> None:
    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITE)
    script = tmp_path / "ends.py"
    script.write_text(_SCRIPT)
    env = {
        "EXIT_MARKS": str(marks),
        "PYTHONPATH": os.pathsep.join(x for x in (str(site), os.environ.get("PYTHONPATH")) if x),
    }
    result = distrain_run("-n", "1", str(script), str(code), env=env, timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == code, out[-3000:]
    assert f"rank 0 ends with {code}" in out, out[-3000:]
    if code:  # the end line is out before the launcher leaves
        assert "exited with code 3" in result.stderr.strip().splitlines()[-1], out[-3000:]
    rows = [line.split() for line in marks.read_text().splitlines()]
    (launcher,) = {pid for what, pid in rows if what == "launcher"}
    ran = sorted(what for what, pid in rows if pid == launcher)
    assert ran == ["atexit", "launcher"], (ran, out[-3000:])
