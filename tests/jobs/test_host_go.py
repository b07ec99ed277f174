"""A host's `distrain run` under the fan-out starts before the launcher's go and waits for it
(launch/hosts/go.py, host_node.py): its imports overlap the hosts' checks, nothing reaches the
network before the go, and a stop instead of the go leaves nothing running.

host_node is driven here directly through its stdin, as the ssh session does.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers import kill_group, python

pytestmark = pytest.mark.timeout(180)

#: a training script imports torch: the node's fork server preloads it before the go (a script
#: that never imports torch gets no fork server at all: launch/fast_start/torch_free.py)
SCRIPT = "import os\nimport torch\nprint('ran with port', os.environ['MASTER_PORT'], flush=True)\n"


def _host_node(tmp_path: Path, port_arg: str) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    spec = json.dumps({"script": str(script)})
    argv = [python(), "-m", "distrain.launch.hosts.node", spec, "--", "--nnodes", "1",
            "--node-rank", "0",
            "--master-addr", "@MASTER_ADDR@", "--master-port", port_arg, "-n", "1",
            str(script)]  # fmt: skip
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _held_node(proc: subprocess.Popen[str]) -> psutil.Process:
    """host_node's `distrain run`, once it has imported torch and forked its fork server."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in psutil.Process(proc.pid).children():
            if "distrain.cli" in child.cmdline() and child.children():
                return child
        assert proc.poll() is None
        time.sleep(0.1)
    raise AssertionError("the node never got past its imports")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_node_runs_before_the_go_and_rendezvous_after_it(tmp_path: Path) -> None:
    port = _free_port()
    proc = _host_node(tmp_path, "@MASTER_PORT@")
    try:
        assert proc.stdout is not None and proc.stdin is not None
        probe = proc.stdout.readline()
        assert probe.startswith("DISTRAIN-HOST "), probe
        node = _held_node(proc)  # started before the go, and through its imports
        time.sleep(1.0)
        assert not _listening(port) and node.is_running()  # held: no rendezvous yet
        proc.stdin.write(json.dumps({"master_addr": "127.0.0.1", "master_port": port}) + "\n")
        proc.stdin.flush()
        proc.wait(
            timeout=120
        )  # stdin stays open: its EOF would stop the job (the ssh session ended)
        out = proc.stdout.read()
    finally:
        kill_group(proc)
    assert proc.returncode == 0, out
    assert f"ran with port {port}" in out, out


def test_a_stop_instead_of_the_go_leaves_nothing(tmp_path: Path) -> None:
    proc = _host_node(tmp_path, "@MASTER_PORT@")
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().startswith("DISTRAIN-HOST ")
        node = _held_node(proc)
        tree = [node, *node.children(recursive=True)]
        proc.stdin.write("abort\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
        gone, alive = psutil.wait_procs(tree, timeout=15)
    finally:
        kill_group(proc)
    assert proc.returncode == 3 and not alive, (out, alive)
    assert "ran with port" not in out and "Traceback" not in out, out
