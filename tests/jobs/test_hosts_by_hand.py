"""`distrain run --hosts … --dry-run` prints, first, the plain command to paste on each host
(launch/hosts/by_hand.py), then the ssh form; pasted as printed, the commands run the job.

The two "hosts" are 127.0.0.1 and 127.0.0.2, both this machine (loopback), so the pasted lines run
here, each in its own shell, as a user runs them on two machines.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from helpers import python, run
from helpers.processes import kill_group

JOB = """import os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}"), "w") as out:
    out.write(f"{dist.get_world_size()} {int(total.item())}")
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pasted(stdout: str) -> dict[str, str]:
    """host → the line printed under its `# on HOST:` comment."""
    lines = stdout.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("# on ")]
    return {lines[i][len("# on ") : -1]: lines[i + 1] for i in starts}


@pytest.mark.timeout(300)
def test_the_pasted_per_host_commands_run_the_job(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "out").mkdir()
    port = free_port()
    res = run(
        [python(), "-m", "distrain.cli", "run", "--hosts", "127.0.0.1:1,127.0.0.2:2",
         "--master-port", str(port), "--dry-run", "job.py", "out"],
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    commands = pasted(res.stdout)
    assert list(commands) == ["127.0.0.1", "127.0.0.2"], res.stdout
    for rank, line in enumerate(commands.values()):
        assert (
            f"distrain run --nnodes 2 --node-rank {rank} --master-addr 127.0.0.1 "
            f"--master-port {port} -n {rank + 1} job.py out"
        ) in line, line
        assert "DISTRAIN-HOST" not in line and "distrain.launch.hosts.node" not in line
    # then the ssh form, as before
    by_hand_end = res.stdout.index(commands["127.0.0.2"])
    assert res.stdout.index("[127.0.0.1] ssh -o BatchMode=yes") > by_hand_end
    # pasted on each "machine": one shell per host, at the same time
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRAIN_")}
    nodes = [
        subprocess.Popen(["bash", "-c", line], cwd=tmp_path, env=env, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in commands.values()
    ]  # fmt: skip
    try:
        outputs = [node.communicate(timeout=240)[0] for node in nodes]
    finally:
        for node in nodes:
            kill_group(node)
    assert [node.returncode for node in nodes] == [0, 0], outputs
    results = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in results] == ["rank0", "rank1", "rank2"], outputs
    assert {p.read_text() for p in results} == {"3 6"}  # 3 ranks, 1 + 2 + 3
