"""Read a script's ``prepare_loader`` call: is its ``batch_size`` computed from ``world_size``?

The reading behind refusal.check_batch_from_world_size; the source is parsed, never run.
"""

from __future__ import annotations

import ast
import functools


@functools.lru_cache(maxsize=8)
def _tree(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _mentions(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "world_size":
            return True
        if isinstance(sub, ast.Name) and sub.id in ("world_size", "WORLD_SIZE"):
            return True
        if isinstance(sub, ast.Constant) and sub.value == "WORLD_SIZE":  # os.environ["WORLD_SIZE"]
            return True
    return False


def batch_mentions_world_size(path: str, line: int) -> str | None:
    """Where the batch_size of the ``prepare_loader`` call on `line` of `path` names
    ``world_size`` ("line N" or "line N, through NAME = … at line M"), else None."""
    tree = _tree(path)
    if tree is None:
        return None
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and call.lineno <= line <= (call.end_lineno or line)):
            continue
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "prepare_loader"):
            continue
        batch = next((k.value for k in call.keywords if k.arg == "batch_size"), None)
        if batch is None and len(call.args) > 1:
            batch = call.args[1]
        if batch is None:
            return None
        if _mentions(batch):
            return f"line {call.lineno}"
        if isinstance(batch, ast.Name):  # one assignment back: bs = GLOBAL // world_size
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and _mentions(node.value):
                    names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                    if batch.id in names:
                        return f"line {call.lineno}, through {batch.id} at line {node.lineno}"
        return None
    return None
