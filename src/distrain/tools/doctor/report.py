"""The doctor's two outputs: a rich table for people and a JSON document for machines."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

from distrain import __version__
from distrain.tools.doctor.check import SCHEMA_VERSION, Check, summarise, worst

_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}


def document(
    checks: list[Check], elapsed_s: float, mode: str = "local", ranks: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``--json`` document (schema in docs/doctor.md)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "distrain doctor",
        "distrain_version": __version__,
        "hostname": socket.gethostname(),
        "mode": mode,
        "elapsed_s": round(elapsed_s, 3),
        "status": worst(checks),
        "summary": summarise(checks),
        "checks": [c.to_json() for c in checks],
        "ranks": ranks,
    }


def print_json(doc: dict[str, Any]) -> None:
    """Write the document to stdout."""
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


def print_table(doc: dict[str, Any]) -> None:
    """A rich table of the checks, then a one-line summary."""
    from rich.console import Console
    from rich.table import Table

    console = Console(
        width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 140, highlight=False
    )
    title = f"distrain doctor · {doc['hostname']}" + (
        f" · {doc['mode']}" if doc["mode"] != "local" else ""
    )
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("seen", overflow="fold")
    table.add_column("fix", overflow="fold")
    for c in doc["checks"]:
        style = _STYLE[c["status"]]
        table.add_row(f"[{style}]{c['status']}[/]", c["title"], c["seen"], c["fix"] or "")
    console.print(table)
    s = doc["summary"]
    console.print(
        f"{s['ok']} ok · {s['info']} info · [yellow]{s['warn']} warn[/] · [red]{s['fail']} fail[/] "
        f"· {doc['elapsed_s']:.2f} s"
    )
