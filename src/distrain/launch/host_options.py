"""`distrain run --hosts/--hostfile`: the options of a job started on many machines from one.

The launching process never imports torch (it only starts ssh sessions), so the command line
is split at the script with a fixed table of `distrain run`'s options: the ones that take no
value are listed here, every other known option takes one.  A unit test keeps the table equal
to the real parser's (plan.option_table()).  Options of the fan-out itself are taken out; the
rest is passed to every host's own `distrain run`, which parses and checks it again there.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ..errors import UsageError
from .hostfile import HostSpec, parse_hostfile, parse_hosts, select

#: `distrain run` options that take no value (torchrun's flags and distrain's)
RUN_FLAGS = frozenset({
    "--cpu", "--dry-run", "--dry_run", "--help", "--legacy-local-rank", "--legacy_local_rank", "--module",
    "--no-python", "--no-self-starting", "--no_python", "--run-path", "--run_path", "--self-starting",
    "--standalone", "--virtual-local-rank", "--virtual_local_rank", "-h", "-m",
})  # fmt: skip
#: `distrain run` options that take a value
RUN_VALUE_OPTIONS = frozenset({
    "--duplicate-stderr-filters", "--duplicate-stdout-filters", "--duplicate_stderr_filters",
    "--duplicate_stdout_filters", "--event-log-handler", "--event_log_handler", "--gpus", "--iface", "--launcher",
    "--local-addr", "--local-ranks-filter", "--local_addr", "--local_ranks_filter", "--log-dir",
    "--log-line-prefix-template", "--log_dir", "--log_line_prefix_template", "--logs-specs", "--logs_specs",
    "--master-addr", "--master-port", "--master_addr", "--master_port", "--max-restarts", "--max_restarts",
    "--monitor-interval", "--monitor_interval", "--nnodes", "--node-rank", "--node_rank", "--nproc",
    "--nproc-per-node", "--nproc_per_node", "--numa-binding", "--numa_binding", "--print-completion",
    "--print_completion", "--rdzv-backend", "--rdzv-conf", "--rdzv-endpoint", "--rdzv-id", "--rdzv_backend",
    "--rdzv_conf", "--rdzv_endpoint", "--rdzv_id", "--redirects", "--replicas", "--role", "--run-dir", "--run_dir",
    "--shutdown-timeout", "--shutdown_timeout", "--signals-to-handle", "--signals_to_handle", "--start-method",
    "--start_method", "--tee", "--watchdog", "-n", "-r", "-t",
})  # fmt: skip
#: the fan-out's own options → takes a value
HOST_OPTIONS = {
    "--hosts": True, "-H": True, "--hostfile": True, "--include": True, "--exclude": True, "--ssh-opts": True,
    "-x": True, "--quiet-hosts": False, "--container": True,
}  # fmt: skip
#: set by the fan-out for every host: giving them by hand contradicts --hosts
_FORBIDDEN = {
    "--node-rank": "each host's --node-rank is its place in the host list",
    "--node_rank": "each host's --node-rank is its place in the host list",
    "--master-addr": "the master is the first host, at the address the others reach it by",
    "--master_addr": "the master is the first host, at the address the others reach it by",
    "--rdzv-endpoint": "the rendezvous is on the first host", "--rdzv_endpoint": "the rendezvous is on the first host",
    "--rdzv-backend": "an elastic --nnodes MIN:N uses c10d on the first host",
    "--rdzv_backend": "an elastic --nnodes MIN:N uses c10d on the first host",
    "--rdzv-id": "each job gets its own id", "--rdzv_id": "each job gets its own id",
    "--local-addr": "each host finds its own", "--local_addr": "each host finds its own",
    "--standalone": "a job on several hosts is not standalone",
    "--launcher": "each host runs torchrun's agent",
}  # fmt: skip
_NPROC = ("-n", "--nproc", "--nproc-per-node", "--nproc_per_node")


#: `distrain run --hosts … --help`
HELP = """usage: distrain run (--hosts H1[:N],H2[:N] | --hostfile FILE) [options] script.py [script args]

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
                          PYTHONPATH, DISTRAIN_* when set)
  --iface NAME | H=NAME,… the network interface of every host, or per host
  --quiet-hosts           show only the first host's output
  --container IMAGE       run each host's node in docker run --gpus all --ipc=host --net=host
  --dry-run               print each host's exact ssh command; start nothing
Every other `distrain run` option is passed to each host's own `distrain run`."""


def table() -> dict[str, bool]:
    """Every option `distrain run --hosts` knows → whether it takes a value."""
    out = {name: False for name in RUN_FLAGS}
    out.update({name: True for name in RUN_VALUE_OPTIONS})
    out.update(HOST_OPTIONS)
    return out


def _option_names(argv: list[str]) -> list[str]:
    """The option names before the script (values and the script's own options left out)."""
    known, names, i = table(), [], 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            break
        name = tok.split("=", 1)[0]
        names.append(name)
        i += 2 if known.get(name) and "=" not in tok else 1
    return names


def wants_hosts(argv: list[str]) -> bool:
    """True when the launcher options (before the script) name --hosts, -H or --hostfile."""
    return any(name in ("--hosts", "-H", "--hostfile") for name in _option_names(argv))


def wants_help(argv: list[str]) -> bool:
    """True when the launcher options ask for -h/--help."""
    return any(name in ("-h", "--help") for name in _option_names(argv))


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
    #: --replicas R: R replica groups, R / len(hosts) on each host
    replicas: int | None = None
    #: with --replicas: processes per group
    per_group: int | None = None


def _value(argv: list[str], i: int) -> tuple[str, str, int]:
    tok = argv[i]
    if "=" in tok and tok.startswith("--"):
        name, value = tok.split("=", 1)
        return name, value, i + 1
    if i + 1 >= len(argv):
        raise UsageError(f"{tok} expects a value")
    return tok, argv[i + 1], i + 2


def _nnodes(value: str, count: int) -> int | None:
    lo, sep, hi = value.partition(":")
    ok = (hi if sep else lo).isdigit() and (not sep or lo.isdigit())
    if ok and int(hi if sep else lo) == count and (not sep or 1 <= int(lo) <= count):
        return int(lo) if sep else None
    raise UsageError(
        f"--nnodes {value} does not fit {count} host(s): give {count}, or MIN:{count} for an elastic job"
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


def parse(argv: list[str]) -> HostsOptions:
    """Take a `distrain run --hosts …` command line apart; UsageError on bad input."""
    known = table()
    own: dict[str, list[str]] = {}
    node_argv: list[str] = []
    i, rest = 0, []
    while i < len(argv):
        tok = argv[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            rest = argv[i + 1 :] if tok == "--" else argv[i:]
            break
        name = tok.split("=", 1)[0]
        if name not in known:
            raise UsageError(
                f"unknown option {name} (see distrain run --help; script options go after the script)"
            )
        if name in _FORBIDDEN:
            raise UsageError(f"{name} cannot be given with --hosts/--hostfile: {_FORBIDDEN[name]}")
        if not known[name]:
            if name in HOST_OPTIONS:
                own.setdefault(name, []).append("")
            else:
                node_argv.append(tok)
            i += 1
            continue
        name, value, i = _value(argv, i)
        if name in HOST_OPTIONS or name in (
            "--nnodes",
            "--iface",
            *_NPROC,
            "--master-port",
            "--master_port",
            "--replicas",
        ):
            own.setdefault(name, []).append(value)
        else:
            node_argv += [name, value]
    if not rest:
        raise UsageError(
            "no training script given (usage: distrain run --hosts h1:N,h2:N [options] script.py [args])"
        )
    return _build(own, node_argv, rest)


def _build(own: dict[str, list[str]], node_argv: list[str], rest: list[str]) -> HostsOptions:
    lists = [k for k in ("--hosts", "-H", "--hostfile") if k in own]
    if len(lists) > 1 or sum(len(own[k]) for k in lists) > 1:
        raise UsageError("give the hosts once: --hosts h1:N,h2:N or --hostfile FILE")
    key = lists[0]
    hosts = parse_hostfile(own[key][0]) if key == "--hostfile" else parse_hosts(own[key][0])
    include, exclude = own.get("--include"), own.get("--exclude")
    hosts = select(hosts, include[-1] if include else None, exclude[-1] if exclude else None)
    opts = HostsOptions(hosts, node_argv, rest, quiet_hosts="--quiet-hosts" in own)
    for text in own.get("--ssh-opts", []):
        opts.ssh_opts += shlex.split(text)
    for item in own.get("-x", []):
        name, sep, value = item.partition("=")
        if not name.isidentifier():
            raise UsageError(f"-x {item}: expected NAME or NAME=VALUE")
        opts.env[name] = value if sep else None
    container = own.get("--container")
    opts.container = container[-1] if container else None
    opts.dry_run = "--dry-run" in node_argv or "--dry_run" in node_argv
    opts.node_argv = [t for t in node_argv if t not in ("--dry-run", "--dry_run")]
    if "--nnodes" in own:
        opts.min_nodes = _nnodes(own["--nnodes"][-1], len(hosts))
    counts = [own[k][-1] for k in _NPROC if k in own]
    if len(set(counts)) > 1:
        raise UsageError(f"-n/--nproc/--nproc-per-node disagree ({', '.join(counts)})")
    opts.nproc = counts[0] if counts else None
    ports = own.get("--master-port", []) + own.get("--master_port", [])
    if ports:
        if not ports[-1].isdigit() or not 0 < int(ports[-1]) < 65536:
            raise UsageError(f"--master-port expects a port number 1..65535 (got {ports[-1]!r})")
        opts.master_port = int(ports[-1])
    if "--iface" in own:
        opts.iface = _iface(own["--iface"][-1])
        unknown = [h for h in opts.iface if h != "*" and h not in {x.name for x in hosts}]
        if unknown:
            raise UsageError(f"--iface: unknown host {unknown[0]}")
    opts.script_is_file = not any(
        t in node_argv for t in ("-m", "--module", "--no-python", "--no_python")
    )
    for j, tok in enumerate(node_argv):
        if tok in ("--run-dir", "--run_dir"):
            opts.run_dir = node_argv[j + 1]
    if "--replicas" in own:
        _replicas(opts, own["--replicas"][-1])
    return opts


def _replicas(opts: HostsOptions, value: str) -> None:
    """--replicas R over the hosts: R/len(hosts) whole groups per host, groups of equal size."""
    hosts = opts.hosts
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"--replicas expects a number of replica groups (got {value!r})")
    groups = int(value)
    if opts.min_nodes is not None:
        raise UsageError(
            f"--replicas needs a fixed --nnodes {len(hosts)}, not a range: a lost host is a lost replica group"
        )
    if groups % len(hosts):
        raise UsageError(
            f"--replicas {groups} does not divide over {len(hosts)} hosts: each host runs the same number of whole groups"
        )
    here = groups // len(hosts)
    if opts.nproc is not None:  # -n keeps its --replicas meaning: processes per group
        if not opts.nproc.isdigit() or int(opts.nproc) < 1:
            raise UsageError(
                f"--replicas needs -n as a number of processes per group (got {opts.nproc!r})"
            )
        opts.replicas, opts.per_group = groups, int(opts.nproc)
        return
    slots = {h.name: h.nproc() for h in hosts}
    sizes = {n // here for n in slots.values() if n is not None and n % here == 0}
    if None in slots.values() or len(sizes) != 1 or any(n % here for n in slots.values() if n):
        given = ", ".join(f"{h}:{n if n is not None else '?'}" for h, n in slots.items())
        raise UsageError(
            f"--replicas {groups} on {len(hosts)} hosts ({given}): every host needs the same slots, "
            f"a multiple of its {here} group(s), or give -n (processes per group)"
        )
    opts.replicas, opts.per_group = groups, sizes.pop()
