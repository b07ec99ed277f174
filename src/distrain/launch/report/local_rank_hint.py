"""A hint for torch.distributed.launch-era scripts: they parse ``--local_rank``.

``torch.distributed.launch`` passed ``--local-rank=N`` (``--local_rank`` before torch 2.0) to
every worker; torchrun does not, and neither does `distrain run` by default: it runs what
torchrun would, and a script that parses the flag fails there just as it fails here (a
required argument missing) or sees its default on every rank.  ``--legacy-local-rank`` passes
it as the old launcher did.  When such a job fails, one line says so (before the last line,
which keeps the cause).
"""

from __future__ import annotations

import argparse
import ast
import os

_FLAGS = ("--local_rank", "--local-rank")


def parses_local_rank(script: str) -> int | None:
    """The line where `script` adds a ``--local_rank``/``--local-rank`` argument (None: none)."""
    try:
        with open(script, "rb") as f:
            tree = ast.parse(f.read(), filename=script)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and any(isinstance(a, ast.Constant) and a.value in _FLAGS for a in node.args)
        ):
            return node.lineno
    return None


def hint(args: argparse.Namespace, prog: str) -> str | None:
    """The line to print when the job failed, or None (no such script, or the flag is passed)."""
    if args.legacy_local_rank or args.module or args.no_python:
        return None
    line = parses_local_rank(args.training_script)
    if line is None:
        return None
    name = os.path.basename(args.training_script)
    return (
        f"{prog}: hint: {name} parses --local_rank (line {line}), which torch.distributed.launch "
        "passed and torchrun does not; add --legacy-local-rank to pass it"
    )
