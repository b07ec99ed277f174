"""The remote end of `distrain run --hosts`: check this host, run its node, watch the session.

The launching machine starts ``python -m distrain.launch.hosts.node …`` on every host over ssh.
It does three things, in this order:

1. **Start and probe**: starts the node's ``distrain run`` at once, held before its rendezvous
   (launch/hosts/go.py: it imports torch meanwhile), then prints one ``DISTRAIN-HOST {json}``
   line (no torch import, ~0.1 s) with the versions of distrain, torch and CUDA here, the GPUs,
   whether the script exists in this working directory and, on the first host, the address the
   others reach it by and a free (or the named) master port.
2. **Go**: waits for one line on stdin from the launcher — the master address and port to put
   in place of ``@MASTER_ADDR@``/``@MASTER_PORT@`` — and passes it to the held node; ``abort``
   (another host failed its check) or EOF instead ends the held node before it started anything.
3. **Watch**: the ssh session's stdin stays open and silent for the whole job.  When it reaches
   EOF (the launcher closed it for Ctrl-C, or the ssh connection dropped and sshd closed the
   channel) — or this process gets SIGTERM/SIGINT/SIGHUP — the node gets SIGTERM (its agent
   passes it to the workers), and whatever of its process tree is left after
   ``STOP_GRACE_S`` is SIGKILLed.  The tree is tracked while it runs, so workers whose agent
   died first are found too (torchrun puts each worker in a session of its own, so killing a
   process group would miss them).

Why stdin EOF and not ``ssh -tt``: with a terminal, sshd's SIGHUP on disconnect reaches only the
session's foreground process group (the agent, not workers in their own sessions), output
gets CRLF line ends and stderr is merged into stdout.  A stdin pipe keeps both streams apart,
and its EOF is reliable: sshd closes it whenever the session ends, however it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from distrain.launch.command_line import POSITIONAL, split
from distrain.launch.hosts.go import GO_FD, NOT_STARTED
from distrain.launch.options.torch_version import torch_versions

#: how long a stopped node may take to exit before its remaining processes are SIGKILLed
STOP_GRACE_S = 10.0
#: the marker of the probe line on stdout
PROBE_MARK = "DISTRAIN-HOST "


def _gpus() -> int:
    """GPUs this host would give a job: /dev/nvidiaN, narrowed by CUDA_VISIBLE_DEVICES."""
    if os.environ.get("DISTRAIN_DEVICE") == "cpu":
        return 0
    try:
        count = sum(1 for name in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", name))
    except OSError:
        count = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and count:
        return len([v for v in visible.split(",") if v.strip() and not v.strip().startswith("-")])
    return count


def fingerprint() -> dict[str, str | None]:
    """What must be the same on every host of a job."""
    from distrain import __version__

    torch, cuda = torch_versions()
    return {"distrain": __version__, "torch": torch, "cuda": cuda, "python": sys.version.split()[0]}


def _address(iface: str | None, route_to: str | None) -> tuple[str | None, str | None]:
    """This (first) host's address as the others reach it, or an error."""
    from distrain.net import host_address, interface_addresses, route_address

    if iface:
        table = interface_addresses()
        if iface not in table:
            return (
                None,
                f"--iface {iface}: no such interface with an IPv4 address (have: "
                f"{', '.join(sorted(table))})",
            )
        return table[iface][0], None
    if route_to:
        try:
            return route_address(route_to), None
        except OSError as err:
            return None, f"no route to {route_to}: {err}"
    server = os.environ.get("SSH_CONNECTION", "").split()
    return (server[2] if len(server) == 4 else host_address()), None


#: the ports this host's probe chose, held (bound, not listening) until the node ends
_HELD: list[socket.socket] = []


def _port(wanted: int, count: int = 1) -> tuple[int | None, str | None]:
    """A master port with the `count` - 1 ports above it free too (the named one, or any).

    Each is held by this process, which outlives the node's job: a port only checked and let
    go could be taken as a loopback connection's source port before the job's store binds it
    (the race ``net.reserve_port`` describes).  The store binds it with ``SO_REUSEADDR``.
    """
    from distrain.net import reserve_port

    def hold_run(first: socket.socket) -> list[socket.socket] | None:
        port, held = int(first.getsockname()[1]), [first]
        try:
            held += [reserve_port(port=port + k) for k in range(1, count)]
        except (OSError, OverflowError):
            for sock in held:
                sock.close()
            return None
        return held

    if wanted == 0:
        for _ in range(20):
            held = hold_run(reserve_port())
            if held is not None:
                _HELD.extend(held)
                return int(held[0].getsockname()[1]), None
        return None, f"no {count} free ports in a row there"
    try:
        first = reserve_port(port=wanted)
    except OSError:
        return None, f"master port {wanted} is already in use there"
    held = hold_run(first)
    if held is None:
        return None, f"port {wanted + 1} (above master port {wanted}) is already in use there"
    _HELD.extend(held)
    return wanted, None


def probe(args: dict[str, object]) -> dict[str, object]:
    """This host's answers to the launcher's checks (see the module docstring)."""
    out: dict[str, object] = {**fingerprint(), "gpus": _gpus(), "cwd": os.getcwd()}
    script = args.get("script")
    out["script_ok"] = script is None or os.path.isfile(str(script))
    if args.get("first"):
        iface, route_to = args.get("iface"), args.get("route_to")
        out["address"], out["address_error"] = _address(
            str(iface) if iface else None, str(route_to) if route_to else None
        )
        port, ports = str(args.get("port") or 0), str(args.get("ports") or 1)
        out["port"], out["port_error"] = _port(int(port), int(ports))
    return out


class _Tree:
    """A node's process and every descendant seen so far (pid and start time: reused pids safe)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        import psutil

        self.proc = proc
        self.seen: dict[int, float] = {}
        with contextlib.suppress(psutil.Error):
            self.seen[proc.pid] = psutil.Process(proc.pid).create_time()

    def track(self) -> None:
        """Remember the descendants alive now."""
        import psutil

        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.seen.setdefault(child.pid, child.create_time())

    def kill(self) -> None:
        """SIGKILL every tracked process still alive (and their own children)."""
        import psutil

        self.track()
        for pid, started in list(self.seen.items()):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if abs(proc.create_time() - started) < 0.01:
                    for child in proc.children(recursive=True):
                        with contextlib.suppress(psutil.Error):
                            child.kill()
                    proc.kill()


def _watch(tree: _Tree, stop: threading.Event) -> int:
    """Wait for the node; on `stop`, SIGTERM it and SIGKILL what is left after STOP_GRACE_S."""
    deadline = None
    while True:
        code = tree.proc.poll()
        if code is not None:
            tree.kill()  # orphans of a node that ended (a worker its agent left behind)
            return code if code >= 0 else 128 - code
        if stop.is_set() and deadline is None:
            deadline = time.monotonic() + STOP_GRACE_S
            with contextlib.suppress(ProcessLookupError):
                tree.proc.send_signal(signal.SIGTERM)
        if deadline is not None and time.monotonic() > deadline:
            tree.kill()
        tree.track()
        if stop.is_set():
            time.sleep(0.2)
        else:
            stop.wait(0.5)


def _read_line() -> str:
    """One line from stdin's fd, byte by byte: nothing after it is buffered away from EOF watch."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            break
        data += chunk
    return data.decode()


def _start_node(node_argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """The node's `distrain run`, started now and held before its rendezvous (launch/hosts/go.py):
    (its process, the write end of its go pipe)."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "distrain.cli", "run", *node_argv],
        stdin=subprocess.DEVNULL,
        pass_fds=(read_end,),
        env={**os.environ, GO_FD: str(read_end)},
    )
    os.close(read_end)
    return proc, write_end


def _not_started(proc: subprocess.Popen[bytes], go: int) -> int:
    """Another host failed its check (or the launcher went away): the held node reads EOF and
    ends by itself; what is left of it after STOP_GRACE_S is killed."""
    os.close(go)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        _Tree(proc).kill()
        proc.wait()
    return NOT_STARTED


def main(argv: list[str]) -> int:
    """``host_node PROBE_JSON -- distrain run ARGV``: start the node held, probe, pass the go on,
    then watch."""
    given = split(argv, argparse.ArgumentParser(add_help=False), leading=1)  # PROBE_JSON, then --
    spec = json.loads(given.value(POSITIONAL) or "")
    node_argv = list(given.script_argv)
    # its imports overlap the check and the launcher's verdict; if this process dies before the
    # go, the kernel closes the pipe and the held node ends by itself
    proc, go = _start_node(node_argv)
    if spec.pop("route_later", False):  # the launcher resolved the hosts while ssh connected
        line = _read_line()
        if not line.strip() or line.strip() == "abort":
            return _not_started(proc, go)
        spec.update(json.loads(line))
    print(PROBE_MARK + json.dumps(probe(spec)), flush=True)
    line = _read_line()
    if not line.strip() or line.strip() == "abort":
        return _not_started(proc, go)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    with contextlib.suppress(OSError):  # a node that already ended: _watch returns its code
        os.write(go, line.encode())
    os.close(go)
    tree = _Tree(proc)

    def eof() -> None:
        # the raw fd, not sys.stdin: a thread blocked in the buffered reader's lock aborts the
        # interpreter at exit ("could not acquire lock for <stdin> at interpreter shutdown")
        with contextlib.suppress(OSError):
            while os.read(0, 4096):  # the launcher never writes again: only EOF matters
                pass
        stop.set()

    threading.Thread(target=eof, daemon=True, name="distrain-ssh-eof").start()
    return _watch(tree, stop)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
