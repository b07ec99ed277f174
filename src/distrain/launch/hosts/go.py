"""A host's `distrain run` started before the launcher of `distrain run --hosts` says go.

launch/hosts/node.py starts the node's `distrain run` at once, with a pipe's read end named by
GO_FD, and checks the host while that interpreter imports torch: the launcher's verdict (the
master's address and port, or a stop) travels while the node's slowest part runs, instead of
before it starts.  The node reads the go line from the pipe after its imports and before
anything reaches the network: no rendezvous, no port bound, nothing forked but the fork server.
An empty read (the host check failed somewhere, or the watcher died) ends it quietly.
"""

from __future__ import annotations

import json
import os

from distrain.contract import HOST_GO_FD
from distrain.launch.command_line import CommandLine, Option

#: the environment variable naming the go pipe's fd (set by host_node for its node only)
GO_FD = HOST_GO_FD
#: stand-ins on the node's command line for what the launcher decides after the hosts' checks
ADDR_TOKEN, PORT_TOKEN = "@MASTER_ADDR@", "@MASTER_PORT@"
#: --replicas on hosts given without slots: processes per group, from the GPUs the hosts counted
NPROC_TOKEN = "@NPROC@"
#: exit code of a node stopped before it started (another host failed its check)
NOT_STARTED = 3


def take_fd() -> int | None:
    """The go pipe's fd when this `distrain run` was started by host_node (the variable is
    removed, so that no worker inherits it), else None."""
    value = os.environ.pop(GO_FD, None)
    return int(value) if value is not None and value.isdigit() else None


def read_go(fd: int) -> dict[str, object] | None:
    """Wait for the launcher's go on `fd`: its fields, or None when told to stop (EOF)."""
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    text = data.decode(errors="replace").strip()
    if not text:
        return None
    go = json.loads(text)
    return go if isinstance(go, dict) else None


def fill(command: CommandLine, go: dict[str, object]) -> CommandLine:
    """`command` with the master's address and port (and the processes per replica group) in
    place of their tokens in the options' values."""
    addr, port, nproc = str(go["master_addr"]), str(go["master_port"]), str(go.get("nproc"))
    # HOST:PORT (the rendezvous endpoint) brackets an IPv6 address; --master-addr takes it bare
    endpoint = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"

    def filled(opt: Option) -> str | None:
        if opt.value is None:
            return None
        if opt.value == NPROC_TOKEN:
            return nproc
        value = opt.value.replace(f"{ADDR_TOKEN}:{PORT_TOKEN}", endpoint)
        return value.replace(ADDR_TOKEN, addr).replace(PORT_TOKEN, port)

    return command.with_values(filled)
