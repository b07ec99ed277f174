"""The result of one doctor check, and how a list of them is summarised.

The JSON form of a :class:`Check` is part of the documented ``--json`` schema
(docs/doctor.md); add fields, never rename or remove them, and bump ``SCHEMA_VERSION`` when a
change is not backwards compatible.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: version of the ``--json`` document; bump on incompatible changes only
SCHEMA_VERSION = 1

Status = Literal["ok", "info", "warn", "fail"]
#: every status, from best to worst; only "fail" makes the exit code non-zero
STATUSES: tuple[Status, ...] = ("ok", "info", "warn", "fail")


@dataclass
class Check:
    """One finding: a stable ``id``, its ``group``, a ``status``, what was ``seen`` and the ``fix``.

    ``fix`` is one or two lines and is set for ``warn`` and ``fail``; ``data`` holds the raw
    values behind ``seen`` for machines (its keys are per check id and documented loosely).
    """

    id: str
    group: str
    title: str
    status: Status
    seen: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"bad status {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        """This check as a JSON-ready dict."""
        return asdict(self)


def summarise(checks: list[Check]) -> dict[str, int]:
    """How many checks have each status."""
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for check in checks:
        counts[check.status] += 1
    return counts


def worst(checks: list[Check]) -> Status:
    """The worst status in `checks` ("ok" for none)."""
    rank = {s: i for i, s in enumerate(STATUSES)}
    return max((c.status for c in checks), key=rank.__getitem__, default="ok")
