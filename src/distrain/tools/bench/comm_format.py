"""`distrain bench comm`'s sizes as the user writes and reads them, and its console tables."""

from __future__ import annotations

import os
import sys
from typing import Any

from distrain.errors import UsageError


def parse_bytes(text: str) -> int:
    """'64M' → 67108864 (K/M/G are powers of 1024; a plain number is bytes)."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(raw[-1:], 1)
    number = raw[:-1] if raw[-1:] in ("K", "M", "G") else raw
    try:
        value = int(float(number) * mult)
    except ValueError:
        raise UsageError(f"not a size: {text!r} (e.g. 8, 4K, 64M, 1G)") from None
    if value < 1:
        raise UsageError(f"size must be at least 1 byte (got {text!r})")
    return value


def sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """Sizes from `min_bytes`, multiplied by `factor`, up to `max_bytes` inclusive."""
    out = []
    size = min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def human(nbytes: int) -> str:
    """4096 → '4 KiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def print_tables(doc: dict[str, Any]) -> None:
    """The results of `distrain bench comm` as one table per collective, on stdout."""
    from rich.console import Console
    from rich.table import Table

    console = Console(
        width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120, highlight=False
    )
    console.print(
        f"distrain bench comm · {doc['world_size']} ranks · {doc['backend']} · {doc['device']} "
        f"· {doc['dtype']}"
    )
    for op in doc["ops"]:
        table = Table(title=op, title_justify="left")
        for col in ("size", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check"):
            table.add_column(col, justify="right" if col != "check" else "left")
        for r in (r for r in doc["results"] if r["op"] == op):
            check = (
                "-"
                if r["correct"] is None
                else (
                    "[green]ok[/]"
                    if r["correct"]
                    else f"[bold red]FAIL ranks {r['wrong_ranks']}[/]"
                )
            )
            table.add_row(
                human(r["bytes"]),
                str(r["count"]),
                f"{r['time_us']:.1f}",
                f"{r['algbw_gbps']:.3f}",
                f"{r['busbw_gbps']:.3f}",
                check,
            )
        console.print(table)
    s = doc["summary"]
    console.print(
        f"avg busbw {s['avg_busbw_gbps']:.3f} GB/s · peak busbw {s['peak_busbw_gbps']:.3f} GB/s · "
        + (
            "[green]all checks passed[/]"
            if s["all_correct"]
            else "[bold red]correctness check FAILED[/]"
        )
    )
