"""`distrain run --hosts h1:8,h2:8 train.py`: one command starts, watches and stops every host.

One ssh session per host, kept for the whole job (launch/hosts/ssh.py builds it; the remote end
is launch/hosts/node.py):

1. every session starts at once, while the host names are resolved (``ssh -G``, for the first
   host's route to the others, sent to it on its stdin); each host answers its checks in one
   line (versions, script, and on the first host its address and a free master port); a host
   that fails, or does not answer within PROBE_TIMEOUT_S, stops the job before anything trains,
   in one line naming it;
2. every host is told the master's address and port and starts its own `distrain run`;
3. their output streams here, each line prefixed with ``[host]``; the launcher's own lines start
   with ``distrain run:``;
4. Ctrl-C or SIGTERM here closes every session's stdin: each host's watcher stops its node
   (SIGTERM, then SIGKILL of what is left after host_node.STOP_GRACE_S).  Sessions still open
   after STOP_BOUND_S are killed, which ends them as well.  A lost session (a dropped
   connection, a killed ssh) is a node loss: an elastic job (``--nnodes MIN:N``) goes on while
   MIN hosts are left, a static one stops with a line naming the host.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from distrain import noise
from distrain.errors import UsageError
from distrain.launch.command_line import CommandLine, split
from distrain.launch.hosts import (
    by_hand,
    options as host_options,
    restarts,
    ssh as ssh_hosts,
    verdict,
)
from distrain.launch.hosts.node import PROBE_MARK, STOP_GRACE_S, fingerprint

PROG = "distrain run"
#: how long every host has to connect and answer its checks
PROBE_TIMEOUT_S = 60.0
#: from a stop to the moment the remaining ssh sessions are killed
STOP_BOUND_S = STOP_GRACE_S + 5.0
#: how long an ended session's output is read to its end: its pipes reach EOF as soon as ssh
#: exits, but on a loaded machine the reader may get no CPU for a while, and a line it had not
#: read by then (a node's verdict) would be missing from the job's last line (it was 2 s)
READ_BOUND_S = 10.0
#: how long the other hosts of a failed job get to find the loss and say their own verdicts
SETTLE_S = 10.0
_PRINT = threading.Lock()


def _say(line: str) -> None:
    with _PRINT:
        sys.stderr.write(f"{PROG}: {line}\n")
        sys.stderr.flush()


class Session:
    """One host's ssh session: its process, its probe answer and its last lines of output."""

    def __init__(self, name: str, argv: list[str], show: bool) -> None:
        self.name, self.show = name, show
        self.probe: dict[str, object] | None = None
        self.probed = threading.Event()
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.started = False  # told to go: its output is the job's from then on
        #: its node's "job failed" verdict (held back for the one last line: hosts/verdict.py)
        self.verdict: str | None = None
        self.root_cause = False  # one of its ranks printed the root cause
        #: the job's restart lines, one per attempt for every host (hosts/restarts.py)
        self.restarts: restarts.RestartLines | None = None
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.readers = [
            threading.Thread(
                target=self._read, args=(self.proc.stdout, sys.stdout, True), daemon=True
            ),
            threading.Thread(
                target=self._read, args=(self.proc.stderr, sys.stderr, False), daemon=True
            ),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, pipe: IO[bytes], out: IO[str], is_stdout: bool) -> None:
        verbose = noise.verbose()
        for raw in iter(pipe.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            if is_stdout and self.probe is None and line.startswith(PROBE_MARK):
                with contextlib.suppress(ValueError):
                    self.probe = json.loads(line[len(PROBE_MARK) :])
                self.probed.set()
                continue
            if not verbose and noise.known_cpp(line):  # c10d's reverse-DNS warning &c.
                continue
            self.tail.append(line)
            self.root_cause = self.root_cause or bool(verdict.ROOT_CAUSE.match(line))
            fold = self.restarts if self.started and not verbose else None
            if fold is not None and fold.take(self.name, line, self.root_cause):
                continue  # said once for the job, by the fan-out
            if self.started and line.startswith(verdict.NODE_VERDICT):
                self.verdict = line[len(verdict.NODE_VERDICT) :]
                if not verbose:  # said once, in the fan-out's last line
                    continue
            if self.show and (self.started or is_stdout):
                with _PRINT:
                    out.write(f"[{self.name}] {line}\n")
                    out.flush()
        self.probed.set()  # the session ended: nobody waits for a probe that cannot come

    def send(self, text: str | None) -> None:
        """Write `text` to the session's stdin; None closes it (the host then stops its node)."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            if text is None:
                self.proc.stdin.close()
            else:
                self.proc.stdin.write(text.encode())
                self.proc.stdin.flush()

    def last_error(self) -> str:
        """The last meaningful line this host printed (its own verdict, or ssh's)."""
        lines = [t.strip() for t in self.tail if t.strip()]
        return lines[-1] if lines else ""

    def reason(self) -> str:
        """Why this session ended, in a few words."""
        code = self.proc.returncode
        last = self.last_error()
        if code is not None and code < 0:
            return f"its ssh session was killed ({signal.Signals(-code).name})"
        if code == 255:
            return f"ssh connection lost ({last or 'exit 255'})"
        return f"exited with code {code}" + (f": {last}" if last else "")


def _check(
    sessions: list[Session], opts: host_options.HostsOptions, stop: threading.Event
) -> tuple[str, int]:
    """(master address, port) from the first host's answer; UsageError naming a host that failed."""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    mine = fingerprint()
    for s in sessions:
        while not s.probed.wait(0.1) and time.monotonic() < deadline:
            if stop.is_set():
                raise UsageError(
                    f"stopped by {getattr(stop, 'signame', 'a signal')} while the "
                    "hosts were checked",
                    130,
                )
    for s in sessions:
        if s.probe is None:
            if s.proc.poll() is None:
                raise UsageError(f"host {s.name}: no answer within {PROBE_TIMEOUT_S:.0f} s")
            s.proc.wait()
            last = s.last_error()
            hint = (
                " (ssh runs with BatchMode=yes: set up key login, no password)"
                if "Permission denied" in last
                else ""
            )
            raise UsageError(
                f"host {s.name}: {last or f'ssh exited with code {s.proc.returncode}'}{hint}"
            )
        probe = s.probe
        for key in ("distrain", "torch", "cuda", "python"):
            if probe.get(key) != mine[key]:
                raise UsageError(
                    f"host {s.name}: {key} {probe.get(key)} there, {mine[key]} here (every "
                    "host needs the same)"
                )
        if not probe.get("script_ok"):
            raise UsageError(
                f"host {s.name}: {opts.script_argv[0]} not found in {probe.get('cwd')}"
            )
    if opts.replicas is not None and opts.per_group is None:  # hosts without slots: their GPUs
        gpus = {s.name: h.nproc() or _gpus(s) for s, h in zip(sessions, opts.hosts, strict=True)}
        opts.per_group = host_options.group_size(gpus, opts.replicas)
    first = sessions[0].probe
    assert first is not None
    for key in ("address_error", "port_error"):
        if first.get(key):
            raise UsageError(f"host {sessions[0].name}: {first[key]}")
    if ":" in str(first["address"]):  # the hosts' own `distrain run` picks IPv4 interfaces
        raise UsageError(
            f"host {sessions[0].name}: the others reach it at IPv6 {first['address']}, but a job's "
            "nodes talk IPv4: give --iface NAME, an interface with an IPv4 address"
        )
    return str(first["address"]), int(first["port"])  # type: ignore[call-overload]


def _gpus(session: Session) -> int | None:
    """The GPUs a host's check counted (None for none: the group-size error names it with '?')."""
    count = (session.probe or {}).get("gpus")
    return count if isinstance(count, int) and count > 0 else None


def _stop(sessions: list[Session]) -> None:
    """Close every session (each host stops its node); kill ssh still open after STOP_BOUND_S."""
    for s in sessions:
        s.send(None)
    deadline = time.monotonic() + STOP_BOUND_S
    for s in sessions:
        try:
            s.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
    for s in sessions:
        for reader in s.readers:
            reader.join(timeout=READ_BOUND_S)


def _settle(others: list[Session], stop: threading.Event) -> None:
    """Let the other hosts of a failed job end by themselves before any is stopped.

    Their ranks find the loss at their next collective and their nodes say their own verdicts;
    rank 0's holds the resume hint.  Stopped the moment the first host ended, a host still
    saying its verdict got SIGTERM in the middle of it (torch's handler raises anywhere in the
    agent's process): the hint was lost from the last line, under load (CI).  A host that has
    said nothing after SETTLE_S (its ranks inside a long step) is stopped then; one that said
    its verdict is given STOP_BOUND_S more to end; Ctrl-C stops them all at once."""
    start = time.monotonic()
    while not stop.is_set():
        running = [s for s in others if s.proc.poll() is None]
        waited = time.monotonic() - start
        if not running or waited > SETTLE_S + STOP_BOUND_S:
            return
        if waited > SETTLE_S and any(s.verdict is None for s in running):
            return
        stop.wait(0.1)


def _supervise(
    sessions: list[Session], opts: host_options.HostsOptions, stop: threading.Event
) -> int:
    """Wait for the job; returns its exit code (see the module docstring for what ends it)."""
    live = set(range(len(sessions)))
    lost: list[str] = []
    failed = 0  # the exit code of a --replicas host that failed while the others trained on
    while live:
        if stop.is_set():
            name = getattr(stop, "signame", "a signal")
            _stop(sessions)
            _say(
                f"stopped by {name}: every host's processes were stopped "
                f"({', '.join(s.name for s in sessions)})"
            )
            return 143 if name == "SIGTERM" else 130
        for i in sorted(live):
            s = sessions[i]
            code = s.proc.poll()
            if code is None:
                continue
            live.discard(i)
            for reader in s.readers:
                reader.join(timeout=READ_BOUND_S)
            if code == 0:
                continue
            # a session that ended without its node's own verdict (a dropped connection, a killed
            # ssh) is a node loss, which an elastic job survives; a node that failed is a failure
            dropped = code < 0 or code == 255
            if dropped and opts.min_nodes is not None and i != 0 and len(live) >= opts.min_nodes:
                lost.append(s.name)
                _say(
                    f"host {s.name} lost: {s.reason()}; the job goes on with {len(live)} host(s) "
                    f"(--nnodes {opts.min_nodes}:{len(sessions)})"
                )
                continue
            if opts.replicas is not None and i != 0 and 0 in live:
                # its groups are lost (or failed for good); the lighthouse is on host 0: the others
                # train on, as the groups of a one-node job do when one of them fails
                lost.append(s.name)
                if not dropped:
                    failed = failed or code
                per_host = opts.replicas // len(sessions)
                groups = ", ".join(str(g) for g in range(i * per_host, (i + 1) * per_host))
                _say(
                    f"host {s.name} lost: {s.reason()}; its replica group(s) {groups} with it, the "
                    f"groups of {len(live)} host(s) train on"
                )
                continue
            others = [sessions[j] for j in live]
            _settle(others, stop)
            _stop(others)  # their verdicts are read to the end: the cause may be another host's
            _say(verdict.failed_line(sessions, s))
            code = verdict.blamed(sessions, s).proc.returncode or code
            return code if 0 < code < 256 else 1
        stop.wait(0.1)
    tail = f"; lost: {', '.join(lost)}" if lost else ""
    _say(f"job finished on {len(sessions) - len(lost)} of {len(sessions)} host(s){tail}")
    return failed if 0 < failed < 256 else (1 if failed else 0)


def _count(nproc: str | None) -> int | None:
    return int(nproc) if nproc is not None and nproc.isdigit() else None


def main(argv: CommandLine | Sequence[str]) -> int:
    """Entry point of `distrain run --hosts/--hostfile` (its command line split or not);
    returns the job's exit code."""
    command = argv if isinstance(argv, CommandLine) else split(argv)
    if command.has("help"):
        print(host_options.HELP)
        return 0
    opts = host_options.parse(command)  # a UsageError is said by `distrain run` (launch/cli.py)
    if opts.dry_run:  # the commands to paste on each host, then what the fan-out runs
        addrs = ssh_hosts.resolve(opts)
        print("\n".join([*by_hand.lines(opts, addrs), *ssh_hosts.dry_run_lines(opts, addrs)]))
        return 0
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.signame = signal.Signals(signum).name  # type: ignore[attr-defined]
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    env, job = ssh_hosts.forwarded_env(opts), ssh_hosts.new_job_id()
    sessions = []
    # every session starts at once, before the names are resolved (ssh -G, in parallel with
    # the connections): the first host learns where to route to once they are
    for rank, host in enumerate(opts.hosts):
        remote = ssh_hosts.remote_command(opts, rank, None, env, job)
        show = rank == 0 or not opts.quiet_hosts
        sessions.append(Session(host.name, ssh_hosts.ssh_argv(opts, host.name, remote), show))
    counts = [_count(opts.nproc) or h.nproc() for h in opts.hosts]
    first = restarts.first_ranks([h.name for h in opts.hosts], counts)
    fold = restarts.RestartLines(len(sessions), _say, None if opts.replicas else first)
    for s in sessions:
        s.restarts = fold
    checked = False
    try:
        sessions[0].send(ssh_hosts.route_line(ssh_hosts.resolve(opts)))
        master, port = _check(sessions, opts, stop)
        checked = True
    finally:  # a host refused (a UsageError, said by launch/cli.py): no host starts
        if not checked:
            for s in sessions:
                s.send("abort\n")
            _stop(sessions)
    kind = f"elastic {opts.min_nodes}:{len(sessions)}" if opts.min_nodes is not None else "static"
    if opts.replicas is not None:
        kind = (
            f"{opts.replicas} replica groups of {opts.per_group}, "
            f"{opts.replicas // len(sessions)} per host"
        )
    _say(
        f"{len(sessions)} hosts ({', '.join(s.name for s in sessions)}), {kind}; master "
        f"{sessions[0].name} at {master}:{port}"
    )
    go = json.dumps({"master_addr": master, "master_port": port, "nproc": opts.per_group}) + "\n"
    for s in sessions:
        s.started = True
        s.send(go)
    return _supervise(sessions, opts, stop)
