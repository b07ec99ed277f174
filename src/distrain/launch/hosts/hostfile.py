"""The hosts of a `distrain run --hosts/--hostfile` job: parsing and filtering, nothing else.

Three spellings, as the launchers people know read them:

- ``--hosts h1:8,h2:8`` (horovodrun ``-H``); ``h1`` alone leaves the slots to the host (its GPUs,
  else ``-n``/one process); an IPv6 address in brackets, ``[fd00::2]:8`` (bare, ``fd00::2``, when
  no slots are given);
- ``--hostfile FILE`` with lines ``host slots=N`` (mpirun, DeepSpeed; ``fd00::2`` or
  ``[fd00::2]`` for an IPv6 host); ``#`` starts a comment,
  blank lines are skipped, other ``key=value`` words (mpirun's ``max_slots=``) are ignored;
- ``--include``/``--exclude`` as DeepSpeed: ``h1@h2:0,2`` keeps (drops) host h1, and slots 0 and
  2 of host h2.  Slot indices become the host's ``--gpus``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distrain.errors import UsageError


@dataclass(frozen=True)
class HostSpec:
    """One host of the job: its name (as ssh knows it), its slots, and the slot indices kept."""

    name: str
    slots: int | None = None
    #: slot (GPU) indices this host uses; None = all of its slots
    slot_ids: tuple[int, ...] | None = field(default=None)

    def nproc(self) -> int | None:
        """Processes to start on this host, or None to let the host decide (its GPUs, else 1)."""
        if self.slot_ids is not None:
            return len(self.slot_ids)
        return self.slots


def _slots(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{where}: slots must be a positive integer (got {text!r})")
    return int(text)


def _check_name(name: str, where: str) -> str:
    """`name` as ssh takes it: an IPv6 address loses its brackets (``[fd00::2]`` → ``fd00::2``)."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if (
        not bare
        or bare.startswith("-")
        or any(c.isspace() or c in "[]" for c in bare)
        or (bare != name and ":" not in bare)
    ):
        raise UsageError(f"{where}: {name!r} is not a host name")
    return bare


def split_port(item: str) -> tuple[str, str, str]:
    """``host:N`` → (host, ":", N); ``[fd00::2]:N`` → ("[fd00::2]", ":", N); an IPv6 address
    without brackets (``fd00::2``) or a name without ``:`` → (item, "", "")."""
    if item.startswith("["):
        close = item.find("]")
        if close > 0 and item[close + 1 : close + 2] == ":":
            return item[: close + 1], ":", item[close + 2 :]
        return item, "", ""
    if item.count(":") == 1:
        return item.partition(":")
    return item, "", ""


def _no_duplicates(hosts: list[HostSpec], where: str) -> list[HostSpec]:
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise UsageError(
                f"{where}: host {host.name} is listed twice (give it once, with all its slots)"
            )
        seen.add(host.name)
    if not hosts:
        raise UsageError(f"{where}: no hosts given")
    return hosts


def parse_hosts(text: str) -> list[HostSpec]:
    """``h1:8,h2:8`` (or ``h1,h2``) → hosts; UsageError on bad input."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        name, sep, slots = split_port(item)
        where = f"--hosts {text}"
        hosts.append(HostSpec(_check_name(name, where), _slots(slots, where) if sep else None))
    return _no_duplicates(hosts, f"--hosts {text}")


def parse_hostfile_text(text: str, path: str = "hostfile") -> list[HostSpec]:
    """The hosts of a hostfile's text: ``host slots=N`` per line, ``#`` comments."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        where = f"{path}:{number}"
        slots = [w.split("=", 1)[1] for w in words[1:] if w.startswith("slots=")]
        host, sep, count = split_port(words[0])
        if not slots and sep and count.isdigit():  # `h1:4`, the --hosts spelling
            fix = f"{_check_name(host, where)} slots={count}"
            raise UsageError(f"{where}: {line!r} has no slots=N (write '{fix}')")
        name = _check_name(words[0], where)
        if not slots:
            raise UsageError(f"{where}: {line!r} has no slots=N (write '{name} slots=N')")
        hosts.append(HostSpec(name, _slots(slots[-1], where)))
    return _no_duplicates(hosts, path)


def parse_hostfile(path: str) -> list[HostSpec]:
    """Read and parse hostfile `path`; UsageError when it cannot be read or is malformed."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise UsageError(f"--hostfile {path}: {err.strerror or err}") from None
    return parse_hostfile_text(text, path)


def _selection(text: str, flag: str) -> dict[str, tuple[int, ...] | None]:
    """``h1@h2:0,2`` → {h1: None, h2: (0, 2)}."""
    chosen: dict[str, tuple[int, ...] | None] = {}
    for item in text.split("@"):
        name, sep, ids = split_port(item.strip())
        name = _check_name(name, f"{flag} {text}")
        if name in chosen:
            raise UsageError(f"{flag} {text}: host {name} is named twice")
        if not sep:
            chosen[name] = None
            continue
        parts = [p.strip() for p in ids.split(",")]
        if not parts or not all(p.isdigit() for p in parts):
            raise UsageError(f"{flag} {text}: slots of {name} must be indices like {name}:0,2")
        chosen[name] = tuple(int(p) for p in parts)
    return chosen


def _slot_range(host: HostSpec, ids: tuple[int, ...], flag: str) -> tuple[int, ...]:
    if host.slots is None:
        raise UsageError(
            f"{flag}: host {host.name} has no slot count, so its slots cannot be picked by index"
        )
    bad = [i for i in ids if i >= host.slots]
    if bad:
        raise UsageError(
            f"{flag}: host {host.name} has {host.slots} slot(s); slot {bad[0]} does not exist"
        )
    return ids


def select(hosts: list[HostSpec], include: str | None, exclude: str | None) -> list[HostSpec]:
    """Apply DeepSpeed's ``--include``/``--exclude`` to `hosts` (at most one of them)."""
    if include and exclude:
        raise UsageError("--include and --exclude cannot be used together")
    if not include and not exclude:
        return hosts
    flag, text = ("--include", include) if include else ("--exclude", exclude)
    assert text is not None
    chosen = _selection(text, flag)
    known = {h.name for h in hosts}
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise UsageError(
            f"{flag}: unknown host {unknown[0]} (the hosts are: {', '.join(h.name for h in hosts)})"
        )
    kept = []
    for host in hosts:
        if host.name not in chosen:
            if exclude:
                kept.append(host)
            continue
        ids = chosen[host.name]
        if ids is None:
            if include:
                kept.append(host)
            continue
        ids = _slot_range(host, ids, flag)
        assert host.slots is not None
        keep = ids if include else tuple(i for i in range(host.slots) if i not in ids)
        if keep:
            kept.append(HostSpec(host.name, host.slots, keep))
    if not kept:
        raise UsageError(f"{flag} {text} leaves no host")
    return kept
