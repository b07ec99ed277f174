"""A real SLURM cluster for the tests: munged, slurmctld and slurmd(s) from a temp dir.

Everything lives in a fresh directory (config from ``tests/slurm/slurm.conf.in``, its own munge
key and socket, free ports), so it never touches a system SLURM and two test sessions can run
side by side.  The daemons run in the foreground as children of the test process; teardown stops
exactly those pids.  Where they cannot start (not root, not installed, no munge) the tests skip
and say why.  Clients reach the cluster through :meth:`SlurmCluster.cmd` (``SLURM_CONF``).

By default the cluster is this host alone.  Given :class:`SlurmNode`s in network namespaces
(helpers/netns_hosts.py), each node's slurmd runs in its namespace and slurmctld and the clients
in the first one's.  They enter it with ``nsenter --net`` (``ip netns exec`` would remount /sys,
hiding the cgroup tree slurmd insists on) in a private mount namespace whose /etc/hosts is a
bind mount of a file in the cluster's directory that names every node, so jobs resolve them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from helpers.paths import REPO

TEMPLATE = REPO / "tests" / "slurm" / "slurm.conf.in"
#: the node is this host under its own name: the batch script's MASTER_ADDR must resolve
NODE = socket.gethostname()
DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "srun", "scontrol", "squeue")


@dataclass
class SlurmNode:
    """One slurmd: its node name, the address slurmctld reaches it at, its namespace (or None)."""

    name: str
    addr: str = "127.0.0.1"
    netns: str | None = None
    hosts_file: str = ""

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run in this node's namespace (same pid: every step execs)."""
        if not self.netns:
            return argv
        mount = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return [
            "nsenter",
            f"--net=/run/netns/{self.netns}",
            "unshare",
            "-m",
            "sh",
            "-c",
            mount,
            self.hosts_file,
            *argv,
        ]


class SlurmUnavailable(Exception):
    """The cluster cannot start here; the message says why (tests skip with it)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    """A running cluster: its directory, client environment and the daemons it started."""

    directory: Path
    env: dict[str, str]
    nodes: list[SlurmNode] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def cmd(
        self, *argv: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client command against this cluster (in the first node's namespace)."""
        out = subprocess.run(
            self.nodes[0].wrap(list(argv)),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {out.returncode}: "
                f"{out.stderr.strip() or out.stdout.strip()}"
            )
        return out

    def sbatch(self, script: Path, *flags: str, cwd: Path) -> str:
        """Submit `script` from `cwd`; the job id."""
        out = self.cmd("sbatch", "--parsable", f"--chdir={cwd}", *flags, str(script))
        return out.stdout.strip().split(";")[0]

    def sbatch_wrap(self, command: str, *flags: str, cwd: Path) -> str:
        """Submit a one-line job (`sbatch --wrap`) from `cwd`; the job id."""
        out = self.cmd("sbatch", "--parsable", f"--chdir={cwd}", *flags, f"--wrap={command}")
        return out.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...); {} once forgotten."""
        out = self.cmd("scontrol", "-o", "show", "job", job_id, check=False)
        fields: dict[str, str] = {}
        for token in out.stdout.split():
            key, _, value = token.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
        """Poll until the job's JobState is one of `states`; AssertionError with the log if not."""
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            time.sleep(0.5)
        raise AssertionError(
            f"job {job_id} not in {sorted(states)} after {timeout}s: {info.get('JobState')} "
            f"{info.get('Reason')}\n{self.logs()}"
        )

    def logs(self, tail: int = 2500) -> str:
        """The tail of the daemons' logs (for failure messages)."""
        parts = []
        for name in (
            "slurmctld.log",
            *(f"slurmd-{n.name}.log" for n in self.nodes),
            "munge/munged.log",
        ):
            path = self.directory / name
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop the daemons this cluster started (by pid), slurmds first, then remove its files."""
        for name in [f"slurmd:{n.name}" for n in self.nodes] + ["slurmctld", "munged"]:
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        shutil.rmtree(self.directory, ignore_errors=True)


def _wait_idle(cluster: SlurmCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise SlurmUnavailable(
                    f"{name} exited with {proc.returncode} at start\n{cluster.logs()}"
                )
        out = cluster.cmd("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=20)
        last = (out.stdout + out.stderr).strip()
        if out.returncode == 0 and all(f"{n.name} idle" in out.stdout for n in cluster.nodes):
            return
        time.sleep(0.5)
    raise SlurmUnavailable(
        f"nodes not idle within {timeout:g}s (sinfo: {last!r})\n{cluster.logs()}"
    )


def _hosts_file(directory: Path, nodes: list[SlurmNode]) -> str:
    """/etc/hosts plus every node's name, for the namespaces' private /etc/hosts."""
    base = (
        Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else "127.0.0.1 localhost\n"
    )
    path = directory / "hosts"
    path.write_text(base.rstrip("\n") + "\n" + "".join(f"{n.addr} {n.name}\n" for n in nodes))
    path.chmod(0o644)
    return str(path)


def start_cluster(
    nodes: list[SlurmNode] | None = None, cpus: int = 2, timeout: float = 60
) -> SlurmCluster:
    """Start munged, slurmctld and the slurmds; SlurmUnavailable (with the reason) if impossible."""
    nodes = nodes or [SlurmNode(NODE)]
    if os.geteuid() != 0:
        raise SlurmUnavailable("SLURM tests need root (the daemons run as root here)")
    missing = [tool for tool in DAEMONS if shutil.which(tool) is None]
    if missing:
        raise SlurmUnavailable(
            f"not installed: {', '.join(missing)} (apt-get install slurmctld slurmd "
            "slurm-client munge)"
        )
    try:
        import pwd

        munge_user = pwd.getpwnam("munge")
    except KeyError:
        raise SlurmUnavailable("no `munge` user (install the munge package)") from None
    directory = Path(tempfile.mkdtemp(prefix="distrain-slurm-"))
    os.chmod(directory, 0o755)
    munge_dir = directory / "munge"
    munge_dir.mkdir()
    munge_dir.chmod(0o755)  # munged wants its socket directory executable by all
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (munge_dir, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    (directory / "state").mkdir()
    hosts_file = _hosts_file(directory, nodes)
    for node in nodes:
        node.hosts_file = hosts_file
        (directory / f"spool-{node.name}").mkdir()
    conf = directory / "slurm.conf"
    text = TEMPLATE.read_text()
    node_lines = "\n".join(
        f"NodeName={n.name} NodeAddr={n.addr} CPUs={cpus} RealMemory=1000 State=UNKNOWN"
        for n in nodes
    )
    for token, value in {"@DIR@": str(directory), "@CTLD_HOST@": socket.gethostname(),
                         "@CTLD_ADDR@": nodes[0].addr, "@NODES@": node_lines, "@GRACE@": "40",
                         "@CTLD_PORT@": str(_free_port()),
                         "@SLURMD_PORT@": str(_free_port())}.items():  # fmt: skip
        text = text.replace(token, value)
    conf.write_text(text)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for key_name in list(env):  # a session inside an allocation must not leak its job into ours
        if key_name.startswith("SLURM_") and key_name != "SLURM_CONF":
            del env[key_name]
    cluster = SlurmCluster(directory, env, nodes)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    try:
        cluster.procs["munged"] = subprocess.Popen(
            ["munged", "-F", f"--socket={munge_dir}/munge.socket", f"--key-file={key}",
             f"--log-file={munge_dir}/munged.log", f"--pid-file={munge_dir}/munged.pid",
             f"--seed-file={munge_dir}/munged.seed"],
            user=munge_user.pw_uid, group=munge_user.pw_gid, **quiet,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not (munge_dir / "munge.socket").exists():
            if cluster.procs["munged"].poll() is not None or time.monotonic() > deadline:
                raise SlurmUnavailable(f"munged did not start\n{cluster.logs()}")
            time.sleep(0.1)
        cluster.procs["slurmctld"] = subprocess.Popen(
            nodes[0].wrap(["slurmctld", "-D", "-i", "-f", str(conf)]), env=env, **quiet
        )
        for node in nodes:
            argv = node.wrap(["slurmd", "-D", "-N", node.name, "-f", str(conf)])
            cluster.procs[f"slurmd:{node.name}"] = subprocess.Popen(argv, env=env, **quiet)
        _wait_idle(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def cluster_or_skip() -> Iterator[SlurmCluster]:
    """Generator body of the session fixture: a started cluster, or pytest.skip with the reason."""
    import pytest

    try:
        cluster = start_cluster()
    except SlurmUnavailable as err:
        pytest.skip(f"no SLURM cluster: {err}")
    try:
        yield cluster
    finally:
        cluster.stop()
