"""Namespace "machines" that each run a real sshd with key login: hosts for `distrain run --hosts`.

``with ssh_cluster(2, tmp_path) as c`` makes 3 namespaces on one bridge (helpers.netns_hosts): hosts
``h0``, ``h1`` (each with its own sshd on port 2222: root logs in by key; passwords are asked, so
that a login without the key meets a password prompt, which BatchMode refuses) and a third one, the
launching machine, that runs the command under test (``c.launch(argv)``).  The ssh aliases are in
``c.config`` (an ssh_config: HostName, Port, the key, no host-key prompts), passed as ``--ssh-opts
"-F CONFIG"``, so the same file that a user's ~/.ssh/config would be is what `distrain run` honours.
Namespaces share the filesystem: every host sees this checkout.  Teardown SIGKILLs every process
left in every namespace, then deletes them.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from helpers import kill_group
from helpers.netns_hosts import Hosts, make_hosts

SSHD = "/usr/sbin/sshd"
PORT = 2222
#: how long after a stop every host must be clean: host_node's grace (10 s) + ssh teardown + load
CLEAN_BOUND_S = 30.0


@dataclass
class SshCluster:
    """`names[i]` is host i's ssh alias; namespace `hosts.names[i]`; the last namespace launches."""

    hosts: Hosts
    names: list[str]
    config: Path
    key: Path

    @property
    def ssh_opts(self) -> list[str]:
        """The `distrain run` arguments that make ssh use this cluster's config."""
        return ["--ssh-opts", f"-F {self.config}"]

    def launch_cmd(self, argv: list[str]) -> list[str]:
        """`argv` run on the launching machine."""
        return self.hosts.cmd(len(self.names), argv)

    def pids(self, i: int) -> list[int]:
        """Processes in host i's namespace other than its sshd listener."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.hosts.names[i]], capture_output=True, text=True, timeout=30
        ).stdout.split()
        listener = self._sshd_pid(i)
        return [int(p) for p in out if int(p) != listener]

    def _sshd_pid(self, i: int) -> int:
        return self._sshd[i].pid

    def describe(self, i: int) -> str:
        """`ps` lines of host i's processes (for a failure message)."""
        pids = self.pids(i)
        if not pids:
            return "(none)"
        res = subprocess.run(
            ["ps", "-o", "pid,ppid,args", "-p", ",".join(map(str, pids))],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return res.stdout

    def wait_clean(self, timeout: float) -> dict[int, str]:
        """Wait until no host has a process besides its sshd; what is left on each host otherwise"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(self.pids(i) for i in range(len(self.names))):
                return {}
            time.sleep(0.2)
        return {i: self.describe(i) for i in range(len(self.names)) if self.pids(i)}

    #: each host's sshd (started with -D: it is the process we started, not a daemon)
    _sshd: list[subprocess.Popen[str]] = field(default_factory=list)


def _missing() -> str | None:
    for tool in (SSHD, "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y openssh-server openssh-client)"
    return None


@contextmanager
def ssh_cluster(
    n: int, tmp_path: Path, rate: str | None = None, sshd_opts: tuple[str, ...] = ()
) -> Iterator[SshCluster]:
    """`n` namespace hosts with sshd (`sshd_opts` added to its command line), plus a launching
    namespace (links limited to `rate` if given); skip where that cannot be made."""
    missing = _missing()
    if missing:
        print(f"SKIP: {missing}")
        pytest.skip(missing)
    folder = tmp_path / "ssh"
    folder.mkdir()
    key, host_key = folder / "id", folder / "host_key"
    for path in (key, host_key):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=60
        )
    (folder / "authorized_keys").write_text((folder / "id.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    with make_hosts(n + 1, rate) as hosts:
        names = [f"h{i}" for i in range(n)]
        lines = [
            f"Host {name}\n  HostName {addr}\n"
            for name, addr in zip(names, hosts.addrs, strict=False)
        ]
        lines.append(
            f"Host *\n  Port {PORT}\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        )
        config = folder / "config"
        config.write_text("".join(lines))
        cluster = SshCluster(hosts, names, config, key)
        try:
            for i in range(n):
                log = folder / f"sshd{i}.log"
                argv = [SSHD, "-D", "-f", "/dev/null", "-h", str(host_key), "-p", str(PORT), "-E",
                        str(log),
                        "-o", "StrictModes=no", "-o", "PermitRootLogin=prohibit-password", "-o",
                        "PasswordAuthentication=yes",
                        "-o", f"AuthorizedKeysFile={folder / 'authorized_keys'}", "-o",
                        f"PidFile={folder / f'sshd{i}.pid'}",
                        "-o", "UsePAM=no", "-o", "MaxStartups=100", *sshd_opts]  # fmt: skip
                cluster._sshd.append(hosts.start(i, argv, folder / f"sshd{i}.out"))
            deadline = time.monotonic() + 60
            for i in range(n):
                log = folder / f"sshd{i}.log"
                while "Server listening" not in (log.read_text() if log.exists() else ""):
                    if time.monotonic() > deadline or cluster._sshd[i].poll() is not None:
                        pytest.skip(
                            "sshd did not start in a namespace here: "
                            f"{(log.read_text() if log.exists() else '')[-500:]}"
                        )
                    time.sleep(0.1)
            yield cluster
        finally:
            for i in range(n + 1):
                with contextlib.suppress(subprocess.SubprocessError):
                    hosts.kill_node(i)


def start_job(c: SshCluster, argv: list[str], log: Path) -> subprocess.Popen[str]:
    """`argv` on the launching machine, its output in `log`; killed at teardown whatever happens."""
    handle = open(log, "w")  # noqa: SIM115 - the child inherits it
    proc = subprocess.Popen(
        c.launch_cmd(argv),
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    handle.close()
    c.hosts.procs.append(proc)
    return proc


def wait_job(proc: subprocess.Popen[str], log: Path, timeout: float) -> int:
    """The job's exit code; a test failure with its log when it runs past `timeout`."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"the job did not end within {timeout} s\n{log.read_text()[-4000:]}")


def until(cond: object, proc: subprocess.Popen[str], log: Path, timeout: float = 120) -> None:
    """Wait for `cond()`; a test failure when the job ends first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline or proc.poll() is not None:
            pytest.fail(f"the job never got there\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


def ssh_of(launcher: subprocess.Popen[str], host: str) -> psutil.Process:
    """The launcher's ssh client process for `host`."""
    for child in psutil.Process(launcher.pid).children(recursive=True):
        cmd = child.cmdline()
        if cmd and cmd[0] == "ssh" and host in cmd:
            return child
    raise AssertionError(f"no ssh session to {host} under the launcher")


def assert_clean(c: SshCluster) -> None:
    """No process but sshd left on any host within CLEAN_BOUND_S."""
    left = c.wait_clean(CLEAN_BOUND_S)
    assert not left, f"processes left on the hosts after {CLEAN_BOUND_S} s: {left}"
