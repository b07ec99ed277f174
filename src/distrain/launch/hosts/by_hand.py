"""`distrain run --hosts … --dry-run`: the command to paste on each host, one per host.

The fan-out runs each host's `distrain run` through a watcher (launch/hosts/node.py) that checks
the host, prints a ``DISTRAIN-HOST`` line and waits for the launcher's go: run by hand, that
line waits and exits 3.  Someone used to one command per machine wants the node's own command,
what the watcher starts once it is told to go: ``distrain run --nnodes 2 --node-rank i
--master-addr … --master-port …``, with the master's address and port filled in.  The address
is the first host's as this machine reaches it (``ssh -G``, then the resolver); the launcher
itself would learn the one the first host routes to the others by, which is the same on a
network where every host reaches every other by one name.
"""

from __future__ import annotations

import os
import shlex

from distrain.launch.command_line import split, split_without_torch
from distrain.launch.hosts.go import NPROC_TOKEN, fill
from distrain.launch.hosts.options import HostsOptions
from distrain.launch.hosts.ssh import docker_run, forwarded_env, new_job_id, node_argv

#: the port a pasted job uses when none was given (torchrun's default): with --hosts the
#: launcher would take a free one on the first host instead
DEFAULT_PORT = 29500


def node_commands(opts: HostsOptions, addrs: list[str]) -> list[list[str]]:
    """Each host's `distrain run` command line (environment assignments first), in host order."""
    port = opts.master_port or DEFAULT_PORT
    # --replicas on hosts without slots: the processes per group come from the hosts' GPU
    # count, known once they are checked; the token stays for the reader to replace
    nproc = NPROC_TOKEN if opts.per_group is None else opts.per_group
    go = {"master_addr": addrs[0], "master_port": port, "nproc": nproc}
    assigns = [f"{k}={v}" for k, v in forwarded_env(opts).items()]
    job = new_job_id()
    out = []
    for rank in range(len(opts.hosts)):
        argv = node_argv(opts, rank, job)
        command = split_without_torch(argv) or split(argv)  # torch's parser only for another torch
        run = ["distrain", "run", *fill(command, go).argv_without()]
        if opts.container:  # as the fan-out runs it: in the image, this folder mounted
            cwd = os.getcwd()
            out.append([*docker_run(cwd, assigns), opts.container, *run])
        else:
            out.append([*assigns, *run])
    return out


def lines(opts: HostsOptions, addrs: list[str]) -> list[str]:
    """The per-host commands as `--dry-run` prints them: a comment naming the host, its line."""
    port = (
        f"port {opts.master_port}"
        if opts.master_port
        else f"port {DEFAULT_PORT} (torchrun's default; --master-port P for another)"
    )
    out = [
        f"# by hand: run each line on its host, in {os.getcwd()}; the master is "
        f"{opts.hosts[0].name} at {addrs[0]} (as this machine reaches it), {port}"
    ]
    if opts.replicas is not None and opts.per_group is None:
        out.append(f"# {NPROC_TOKEN}: the processes per replica group (the hosts' GPUs / groups)")
    for host, argv in zip(opts.hosts, node_commands(opts, addrs), strict=True):
        out.append(f"# on {host.name}:")
        out.append(shlex.join(argv))
    return out
