"""`distrain run --hosts/--hostfile`: the options of a job started on many machines from one.

The command line comes split at the script (launch/command_line.py: the same parser as every
other `distrain run`, where the fan-out's options are registered too).  Options of the fan-out
itself are taken out; the rest is passed to every host's own `distrain run`, which parses and
checks it again there.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from distrain.errors import UsageError
from distrain.launch.command_line import CommandLine
from distrain.launch.hosts import env_file
from distrain.launch.hosts.hostfile import HostSpec, parse_hostfile, parse_hosts, select
from distrain.launch.options.run_options import HOST_DESTS, HOST_LIST
from distrain.launch.options.validate import node_range_or_none

#: the options (dests) that name the hosts: they make a `distrain run` a fan-out
#: set by the fan-out for every host: giving them by hand contradicts --hosts
_FORBIDDEN = {
    "node_rank": "each host's --node-rank is its place in the host list",
    "master_addr": "the master is the first host, at the address the others reach it by",
    "rdzv_endpoint": "the rendezvous is on the first host",
    "rdzv_backend": "an elastic --nnodes MIN:N uses c10d on the first host",
    "rdzv_id": "each job gets its own id",
    "local_addr": "each host finds its own",
    "standalone": "a job on several hosts is not standalone",
    "launcher": "each host runs torchrun's agent",
}
_NPROC = ("nproc", "nproc_per_node")
#: options read here (the fan-out's, and those it gives each host itself)
_OWN = (*HOST_DESTS, "nnodes", "iface", *_NPROC, "master_port", "replicas")


#: `distrain run --hosts … --help`
HELP = """usage: distrain run (--hosts H1[:N],H2[:N] | --hostfile FILE) [options]
                    script.py [script args]

Start the job on every host over ssh, from this machine (docs/multinode.md).

  --hosts, -H H1:N,H2:N   hosts and their slots (processes); no :N = the host's GPUs, else its cores
  --hostfile FILE         lines of `host slots=N` (mpirun, DeepSpeed); # comments
  --include / --exclude   DeepSpeed's syntax: h1@h2:0,2 keeps (drops) host h1 and slots 0, 2 of h2
  --nnodes N | MIN:N      N = the number of hosts; MIN:N: elastic, a lost host is a node loss
  -n N                    processes on every host instead of the slots (with --replicas: per group)
  --replicas R            R replica groups, R/hosts on each host (its slots split among them);
                          a lost host is a lost group, the others train on
  --ssh-opts "OPTS"       options for ssh (~/.ssh/config applies as always), e.g. "-F cfg -i key"
  -x NAME[=VALUE]         forward a variable (by default: NCCL_*, GLOO_*, CUDA_VISIBLE_DEVICES,
                          PYTHONPATH, DISTRAIN_* when set); NAME=VALUE lines of ~/.distrain_env,
                          ./.distrain_env (and DeepSpeed's .deepspeed_env) are set on every host
  --iface NAME | H=NAME,… the network interface of every host, or per host
  --quiet-hosts           show only the first host's output
  --container IMAGE       run each host's node in docker run --gpus all --ipc=host --net=host
  --dry-run               print the command to paste on each host, then each host's ssh
                          command; start nothing
Every other `distrain run` option is passed to each host's own `distrain run`."""


@dataclass
class HostsOptions:
    """A `distrain run --hosts` command line, taken apart."""

    hosts: list[HostSpec]
    #: launcher options passed on to every host's `distrain run` (not the fan-out's own)
    node_argv: list[str]
    #: [script, *script args]
    script_argv: list[str]
    ssh_opts: list[str] = field(default_factory=list)
    #: -x NAME[=VALUE]: names to forward, with a value where given
    env: dict[str, str | None] = field(default_factory=dict)
    quiet_hosts: bool = False
    container: str | None = None
    dry_run: bool = False
    #: --nnodes MIN:N → MIN; None for a static job
    min_nodes: int | None = None
    #: -n/--nproc as given (for every host), or None: each host's slots
    nproc: str | None = None
    master_port: int | None = None
    #: --iface: one name for every host, or host → name
    iface: dict[str, str] = field(default_factory=dict)
    #: the script is a path to check on every host (not -m / --no-python)
    script_is_file: bool = True
    run_dir: str | None = None
    #: --max-restarts was given (else an elastic job gets the fan-out's budget)
    restarts_given: bool = False
    #: --replicas R: R replica groups, R / len(hosts) on each host
    replicas: int | None = None
    #: with --replicas: processes per group (None until the hosts' checks counted their GPUs,
    #: for hosts given without slots)
    per_group: int | None = None
    #: the variables of ~/.distrain_env & co. (launch/hosts/env_file.py), and the files they came
    #: from
    env_file: dict[str, str] = field(default_factory=dict)
    env_files: list[str] = field(default_factory=list)


def _nnodes(value: str, count: int) -> int | None:
    fits = node_range_or_none(value)
    if fits is not None and fits[1] == count:
        return fits[0] if ":" in value else None
    raise UsageError(
        f"--nnodes {value} does not fit {count} host(s): give {count}, or MIN:{count} "
        "for an elastic job"
    )


def _iface(value: str) -> dict[str, str]:
    if "=" not in value:
        return {"*": value}
    out = {}
    for item in value.split(","):
        host, _, name = item.partition("=")
        if not host or not name:
            raise UsageError(f"--iface {value}: write NAME, or HOST=NAME,HOST=NAME")
        out[host.strip()] = name.strip()
    return out


def parse(command: CommandLine) -> HostsOptions:
    """Take a `distrain run --hosts …` command line apart; UsageError on bad input."""
    own: dict[str, list[tuple[str, str]]] = {}  # dest -> (name as given, value)
    node_argv: list[str] = []
    command.refuse_unknown()  # with the option meant, or the ones abbreviated
    for opt in command.options:
        if opt.dest in _FORBIDDEN:
            raise UsageError(
                f"{opt.name} cannot be given with --hosts/--hostfile: {_FORBIDDEN[opt.dest]}"
            )
        if opt.takes_value and opt.value is None:
            raise UsageError(f"{opt.name} expects a value")
        if opt.dest in _OWN:
            own.setdefault(opt.dest, []).append((opt.name, opt.value or ""))
        elif opt.dest == "dry_run":  # here: print each host's command; the hosts run nothing
            continue
        elif opt.takes_value:
            node_argv += [opt.name, str(opt.value)]
        else:
            node_argv += opt.tokens
    if not command.script_argv:
        raise UsageError(
            "no training script given (usage: distrain run --hosts h1:N,h2:N [options] "
            "script.py [args])"
        )
    return _build(own, node_argv, command)


def _last(own: dict[str, list[tuple[str, str]]], dest: str) -> str | None:
    return own[dest][-1][1] if dest in own else None


def _build(
    own: dict[str, list[tuple[str, str]]], node_argv: list[str], command: CommandLine
) -> HostsOptions:
    lists = [k for k in HOST_LIST if k in own]
    if len(lists) > 1 or sum(len(own[k]) for k in lists) > 1:
        raise UsageError("give the hosts once: --hosts h1:N,h2:N or --hostfile FILE")
    key = lists[0]
    text = own[key][0][1]
    hosts = parse_hostfile(text) if key == "hostfile" else parse_hosts(text)
    hosts = select(hosts, _last(own, "include"), _last(own, "exclude"))
    opts = HostsOptions(
        hosts, node_argv, list(command.script_argv), quiet_hosts="quiet_hosts" in own
    )
    for _, value in own.get("ssh_opts", []):
        opts.ssh_opts += shlex.split(value)
    for _, item in own.get("forward", []):
        name, sep, value = item.partition("=")
        if not name.isidentifier():
            raise UsageError(f"-x {item}: expected NAME or NAME=VALUE")
        opts.env[name] = value if sep else None
    opts.env_file, opts.env_files = env_file.load()
    opts.container = _last(own, "container")
    opts.dry_run = command.has("dry_run")
    nnodes = _last(own, "nnodes")
    if nnodes is not None:
        opts.min_nodes = _nnodes(nnodes, len(hosts))
    # each spelling's last value: -n 2 --nproc 3 disagree
    counts = list(dict.fromkeys({name: v for d in _NPROC for name, v in own.get(d, [])}.values()))
    if len(counts) > 1:
        raise UsageError(f"-n/--nproc/--nproc-per-node disagree ({', '.join(counts)})")
    opts.nproc = counts[0] if counts else None
    port = _last(own, "master_port")
    if port is not None:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--master-port expects a port number 1..65535 (got {port!r})")
        opts.master_port = int(port)
    iface = _last(own, "iface")
    if iface is not None:
        opts.iface = _iface(iface)
        unknown = [h for h in opts.iface if h != "*" and h not in {x.name for x in hosts}]
        if unknown:
            raise UsageError(f"--iface: unknown host {unknown[0]}")
    opts.script_is_file = not command.has("module", "no_python")
    opts.run_dir = command.value("run_dir")
    opts.restarts_given = command.has("max_restarts")
    replicas = _last(own, "replicas")
    if replicas is not None:
        _replicas(opts, replicas)
    return opts


def _replicas(opts: HostsOptions, value: str) -> None:
    """--replicas R over the hosts: R/len(hosts) whole groups per host, groups of equal size."""
    hosts = opts.hosts
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"--replicas expects a number of replica groups (got {value!r})")
    groups = int(value)
    if opts.min_nodes is not None:
        raise UsageError(
            f"--replicas needs a fixed --nnodes {len(hosts)}, not a range: a lost host is a "
            "lost replica group"
        )
    if groups % len(hosts):
        raise UsageError(
            f"--replicas {groups} does not divide over {len(hosts)} hosts: each host runs the same "
            "number of whole groups"
        )
    if opts.nproc is not None:  # -n keeps its --replicas meaning: processes per group
        if not opts.nproc.isdigit() or int(opts.nproc) < 1:
            raise UsageError(
                f"--replicas needs -n as a number of processes per group (got {opts.nproc!r})"
            )
        opts.replicas, opts.per_group = groups, int(opts.nproc)
        return
    slots = {h.name: h.nproc() for h in hosts}
    opts.replicas = groups
    if None in slots.values():  # a host without slots: its GPUs, counted by its check (hosts_run)
        return
    opts.per_group = group_size(slots, groups)


def group_size(slots: dict[str, int | None], groups: int) -> int:
    """Processes per replica group when each host's slots (given, or its GPUs) split evenly into
    its groups; UsageError otherwise."""
    here = groups // len(slots)
    sizes = {n // here for n in slots.values() if n and n % here == 0}
    if None in slots.values() or len(sizes) != 1 or any(not n or n % here for n in slots.values()):
        given = ", ".join(f"{h}:{n if n is not None else '?'}" for h, n in slots.items())
        raise UsageError(
            f"--replicas {groups} on {len(slots)} hosts ({given}): every host needs "
            "the same slots, "
            f"a multiple of its {here} group(s), or give -n (processes per group)"
        )
    return sizes.pop()
