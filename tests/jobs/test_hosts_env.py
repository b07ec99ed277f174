"""`distrain run --hosts` with environment files (./.distrain_env, DeepSpeed's ./.deepspeed_env):
the variables reach the script on every real ssh host (helpers/ssh_cluster.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import python
from helpers.ssh_cluster import assert_clean, ssh_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

SCRIPT = """import os
print("node", os.environ["GROUP_RANK"], "FROM_FILE=" + os.environ.get("FROM_FILE", "?"),
      "FROM_DS=" + os.environ.get("FROM_DS", "?"), flush=True)
"""


def test_environment_files_reach_the_script_on_every_host(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "show_env.py").write_text(SCRIPT)
    (work / ".deepspeed_env").write_text("FROM_DS=deepspeed file\nFROM_FILE=overridden\n")
    (work / ".distrain_env").write_text("# distrain's own wins\nexport FROM_FILE='hello world'\n")
    with ssh_cluster(2, tmp_path) as c:
        argv = [python(), "-m", "distrain.cli", "run", "--hosts", "h0:1,h1:1", *c.ssh_opts,
                "show_env.py"]  # fmt: skip
        shown = subprocess.run(c.launch_cmd([*argv[:-1], "--dry-run", "show_env.py"]), cwd=work,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert (f"# set on every host from {work / '.deepspeed_env'}, {work / '.distrain_env'}: "
                "FROM_DS FROM_FILE") in shown.stdout, shown.stdout + shown.stderr  # fmt: skip
        res = subprocess.run(c.launch_cmd(argv), cwd=work, capture_output=True, text=True,
                             timeout=240)  # fmt: skip
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-3000:]
        for host in (0, 1):
            line = f"[h{host}] node {host} FROM_FILE=hello world FROM_DS=deepspeed file"
            assert line in out, out[-3000:]
        (work / ".distrain_env").write_text("FROM_FILE hello\n")
        bad = subprocess.run(c.launch_cmd(argv), cwd=work, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert bad.returncode == 2 and bad.stderr == (
            f"distrain run: error: {work / '.distrain_env'}:1: 'FROM_FILE hello' is "
            "not NAME=VALUE\n"
        ), bad.stderr
        assert_clean(c)
