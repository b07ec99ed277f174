"""`distrain run --hosts`: the command each host runs, and the ssh command that starts it there.

Everything goes through the system OpenSSH client, so ``~/.ssh/config`` (aliases, ports, keys,
jump hosts) applies as it does for the user's own ``ssh``.  ``BatchMode=yes`` makes a host that
would ask for a password fail at once instead of waiting for a prompt nobody sees.  Each host
runs the launcher's own interpreter (``sys.executable``) in the launcher's working directory,
with the forwarded variables set by ``env`` on the remote command line (ssh starts a fresh
environment there), as mpirun's ``-x`` does.
"""

from __future__ import annotations

import fnmatch
import getopt
import json
import os
import shlex
import socket
import subprocess
import sys
import threading

from distrain.errors import UsageError
from distrain.launch.command_line import script_tail
from distrain.launch.hosts.go import ADDR_TOKEN, NPROC_TOKEN, PORT_TOKEN
from distrain.launch.hosts.hostfile import HostSpec
from distrain.launch.hosts.options import HostsOptions
from distrain.net import is_loopback

#: variables forwarded to every host unless -x says otherwise (mpirun forwards none by default)
DEFAULT_FORWARD = ("NCCL_*", "GLOO_*", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "DISTRAIN_*")
#: ours come after the user's --ssh-opts: ssh keeps the first value of each option it is given
SSH_DEFAULTS = [
    "-o",
    "ConnectTimeout=10",
    "-o",
    "ServerAliveInterval=5",
    "-o",
    "ServerAliveCountMax=3",
]
#: how long resolving the host names may take, all together
RESOLVE_TIMEOUT_S = 15.0
#: restarts an elastic job gets when none are given: a lost host fails the survivors' workers once
ELASTIC_RESTARTS = "3"


def forwarded_env(opts: HostsOptions, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables every host gets: DEFAULT_FORWARD's that are set here, then those of the
    environment files (launch/hosts/env_file.py), then -x NAME[=VALUE]."""
    environ = dict(os.environ if environ is None else environ)
    out = {
        k: v
        for k, v in sorted(environ.items())
        if any(fnmatch.fnmatchcase(k, p) for p in DEFAULT_FORWARD)
    }
    out.update(opts.env_file)
    for name, value in opts.env.items():
        if value is not None:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


def ssh_argv(opts: HostsOptions, host: str, remote: str) -> list[str]:
    """The ssh command that runs `remote` (a shell command line) on `host`."""
    return ["ssh", "-o", "BatchMode=yes", *opts.ssh_opts, *SSH_DEFAULTS, host, remote]


_FAMILIES = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}


#: ssh(1)'s options as its getopt(3) string: a letter with ``:`` takes a value (``-i -F`` is a
#: key file named -F, not a configuration file)
SSH_GETOPT = "46AaCfGgKkMNnqsTtVvXxYyB:b:c:D:E:e:F:I:i:J:L:l:m:O:o:P:p:Q:R:S:W:w:"


def config_file(ssh_opts: list[str]) -> str:
    """The ssh configuration file ssh reads with these options: the last ``-F FILE``, else
    ``~/.ssh/config`` (also when ssh would refuse the options: it then names no file)."""
    try:
        given, _ = getopt.getopt(ssh_opts, SSH_GETOPT)  # ssh reads its line with getopt(3)
    except getopt.GetoptError:
        given = []
    return dict(given).get("-F", "~/.ssh/config")


def resolve(opts: HostsOptions) -> list[str]:
    """Each host's address as this machine reaches it (``ssh -G`` applies ~/.ssh/config), in
    parallel; UsageError naming an unknown host."""

    def one(host: HostSpec) -> str | UsageError:
        """The address, or the error to raise in the caller's thread."""
        res = subprocess.run(
            ["ssh", "-G", *opts.ssh_opts, host.name],
            capture_output=True,
            text=True,
            timeout=RESOLVE_TIMEOUT_S,
        )
        if res.returncode != 0:
            return UsageError(
                f"host {host.name}: ssh cannot use it: "
                f"{(res.stderr.strip().splitlines() or ['?'])[-1]}"
            )
        config = dict(
            line.split(None, 1) for line in res.stdout.splitlines() if len(line.split(None, 1)) == 2
        )
        name = config.get("hostname", host.name)
        # ssh's AddressFamily (-4, -6, ~/.ssh/config): the address it connects to is of that family
        family = _FAMILIES.get(config.get("addressfamily", "any"), socket.AF_UNSPEC)
        try:
            return str(socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)[0][4][0])
        except OSError:
            return UsageError(
                f"unknown host {host.name}: {name} does not resolve (not in "
                f"{config_file(opts.ssh_opts)}, /etc/hosts or DNS)"
            )

    # plain threads, not concurrent.futures: this runs while the ssh sessions connect, and the
    # launcher's imports are on the path to the first step
    found: list[str | UsageError | None] = [None] * len(opts.hosts)

    def into(i: int) -> None:
        try:
            found[i] = one(opts.hosts[i])
        except (OSError, subprocess.SubprocessError) as err:
            found[i] = UsageError(f"host {opts.hosts[i].name}: ssh -G failed: {err}")

    threads = [threading.Thread(target=into, args=(i,), daemon=True) for i in range(len(found))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RESOLVE_TIMEOUT_S + 5)
    out = []
    for host, item in zip(opts.hosts, found, strict=True):
        if isinstance(item, UsageError):
            raise item
        if item is None:
            raise UsageError(
                f"host {host.name}: ssh -G gave no answer within {RESOLVE_TIMEOUT_S:.0f} s"
            )
        out.append(item)
    return out


def node_argv(opts: HostsOptions, rank: int, rdzv_id: str) -> list[str]:
    """Host `rank`'s own `distrain run` arguments (master address/port still as tokens).

    A host without slots gets ``-n auto``: its GPUs, else its CPU cores (as mpirun counts slots).
    """
    host, count = opts.hosts[rank], len(opts.hosts)
    nproc = opts.nproc or host.nproc() or "auto"
    if opts.min_nodes is None:
        out = [
            "--nnodes",
            str(count),
            "--node-rank",
            str(rank),
            "--master-addr",
            ADDR_TOKEN,
            "--master-port",
            PORT_TOKEN,
        ]
    else:
        out = [
            "--nnodes",
            f"{opts.min_nodes}:{count}",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{ADDR_TOKEN}:{PORT_TOKEN}",
            "--rdzv-id",
            rdzv_id,
        ]
        if not opts.restarts_given:
            out += ["--max-restarts", ELASTIC_RESTARTS]
    if opts.replicas is not None:  # the one-node --replicas form across nodes (replica_nodes.py)
        size = str(opts.per_group) if opts.per_group is not None else NPROC_TOKEN  # GPUs: at go
        out += ["--replicas", str(opts.replicas), "-n", size]
    else:
        out += ["-n", str(nproc)]
    if host.slot_ids is not None and opts.replicas is None:  # replicas: CUDA_VISIBLE_DEVICES
        out += ["--gpus", ",".join(map(str, host.slot_ids))]
    iface = opts.iface.get(host.name) or opts.iface.get("*")
    if iface:
        out += ["--iface", iface]
    return out + opts.node_argv + script_tail(opts.script_argv)


def probe_spec(opts: HostsOptions, rank: int, addrs: list[str] | None) -> dict[str, object]:
    """What host `rank` is asked to check (host_node.probe).

    `addrs` None: the sessions start before the host names are resolved (that takes a moment,
    and the ssh connections longer); the first host then reads the address to route to from
    its stdin (:func:`route_line`) before it answers.
    """
    spec: dict[str, object] = {"script": opts.script_argv[0] if opts.script_is_file else None}
    if rank == 0:
        iface = opts.iface.get(opts.hosts[0].name) or opts.iface.get("*")
        if addrs is None:
            spec.update(first=True, port=opts.master_port or 0, iface=iface, route_later=True)
            spec["ports"] = 2 if opts.replicas is not None else 1
            return spec
        others = [a for a in addrs[1:] if not is_loopback(a)]
        spec.update(
            first=True,
            port=opts.master_port or 0,
            # --replicas: the lighthouse on the port, the nodes' roll call one above
            # (replica_nodes.py)
            ports=2 if opts.replicas is not None else 1,
            iface=iface,
            route_to=others[0] if others else None,
        )
    return spec


def route_line(addrs: list[str]) -> str:
    """The line the first host reads when its sessions started before the names were resolved."""
    others = [a for a in addrs[1:] if not is_loopback(a)]
    return json.dumps({"route_to": others[0] if others else None}) + "\n"


def docker_run(
    cwd: str, assigns: list[str], *, name: str | None = None, interactive: bool = False
) -> list[str]:
    """``docker run`` as a host's launcher runs in ``--container``: the GPUs, the host's IPC and
    network, `cwd` mounted as the working directory, each ``NAME=VALUE`` of `assigns` set."""
    head = ["docker", "run", *(["-i"] if interactive else []), "--rm"]
    head += ["--name", name] if name else []
    head += ["--gpus", "all", "--ipc=host", "--net=host", "-v", f"{cwd}:{cwd}", "-w", cwd]
    return head + [token for assign in assigns for token in ("-e", assign)]


def remote_command(
    opts: HostsOptions, rank: int, addrs: list[str] | None, env: dict[str, str], rdzv_id: str
) -> str:
    """The shell command line host `rank` runs: host_node in this working directory."""
    cwd, slot_ids = os.getcwd(), opts.hosts[rank].slot_ids
    if opts.replicas is not None and slot_ids is not None:  # --replicas takes GPUs this way only
        env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, slot_ids))}
    spec = json.dumps(probe_spec(opts, rank, addrs), separators=(",", ":"))
    tail = ["-m", "distrain.launch.hosts.node", spec, "--", *node_argv(opts, rank, rdzv_id)]
    if opts.container:
        assigns = [f"{key}={value}" for key, value in env.items()]
        docker = docker_run(cwd, assigns, name=f"distrain-{rdzv_id}-{rank}", interactive=True)
        return f"cd {shlex.quote(cwd)} && exec " + shlex.join(
            [*docker, opts.container, "python", *tail]
        )
    assigns = [f"{k}={v}" for k, v in env.items()]
    return f"cd {shlex.quote(cwd)} && exec " + shlex.join(["env", *assigns, sys.executable, *tail])


def new_job_id() -> str:
    """A rendezvous id (and container name part) no other job shares."""
    return os.urandom(4).hex()  # not `secrets`: its hashlib/hmac import costs the launcher


def dry_run_lines(opts: HostsOptions, addrs: list[str]) -> list[str]:
    """`--dry-run`: each host's exact ssh command, nothing started."""
    env, job = forwarded_env(opts), new_job_id()
    port = f"port {opts.master_port}" if opts.master_port else "a free port there"
    lines = [
        "# what distrain run --hosts runs over ssh: each host's command through a watcher "
        "that checks the host and waits for the launcher's go (by hand, use the lines above)",
        f"# {ADDR_TOKEN} and {PORT_TOKEN} are filled in when the job starts: the address "
        f"{opts.hosts[0].name} reaches the others by, and {port}",
    ]
    if opts.per_group is None and opts.replicas is not None:
        lines.append(
            f"# {NPROC_TOKEN}: the processes per replica group, from the GPUs the "
            "hosts' checks count"
        )
    if opts.env_files:
        lines.append(
            f"# set on every host from {', '.join(opts.env_files)}: "
            f"{' '.join(sorted(opts.env_file)) or '(nothing)'}"
        )
    for rank, host in enumerate(opts.hosts):
        lines.append(
            f"[{host.name}] "
            + shlex.join(ssh_argv(opts, host.name, remote_command(opts, rank, addrs, env, job)))
        )
    return lines
