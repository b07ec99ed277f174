"""Scripts that start their own workers: found by reading the script, run once by `distrain run`.

The tutorials start their processes themselves: ``mp.spawn(main, nprocs=world_size)``,
``torch.multiprocessing.start_processes``, a loop of ``Process(target=main, args=(rank,
world_size))`` with ``MASTER_PORT`` fixed in the script, or a ``Pool`` whose workers form a
group.  Run as N copies, each copy starts its own N children on the same fixed port
(``EADDRINUSE``) or N² processes.  Such a script runs once; its children are the job, and the
worker side (distrain.worker.self_start, never imported here) watches them form their group.

The check follows names however the script imports them (``import multiprocessing as mp``,
``from torch import multiprocessing``, ``from multiprocessing import Process as P``,
``ctx = mp.get_context("spawn"); ctx.Process``).  A ``Process`` counts only inside a loop or
a comprehension: one helper process is not a group of workers.

A source-only guess never silently reshapes a job: a starter reached only through a condition
(``if args.multiprocessing_distributed: mp.spawn(...)``, pytorch/examples imagenet, whose
torchrun way is ``--dist-url env://`` with N copies) makes the job run as torchrun would, N
copies, with a line saying what was seen; ``--self-starting`` / ``--no-self-starting`` decide.
Only ``if __name__ == "__main__"`` counts as unconditional.  A starter inside a function that is
itself called under a condition is not seen as conditional (the read does not follow calls).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from distrain.contract import SELF_STARTING
from distrain.errors import UsageError
from distrain.settings import boot_first

_MODULES = {"multiprocessing", "torch.multiprocessing", "multiprocess"}
_SPAWNERS = {"spawn", "start_processes"}
_STARTERS = _SPAWNERS | {"Process", "Pool"}
_LOOPS = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ListComp,
    ast.SetComp,
    ast.GeneratorExp,
    ast.DictComp,
)


@dataclass(frozen=True)
class SelfStart:
    """Where a script starts its own workers: what it calls and on which line."""

    kind: str  # e.g. "multiprocessing.Process", "torch.multiprocessing.spawn"
    line: int
    #: the condition the starter runs under (source text), "" when it always runs
    condition: str = ""

    @property
    def sure(self) -> bool:
        """Whether the script starts its workers whatever its arguments (no condition seen)."""
        return not self.condition

    def start_line(self, prog: str, script_name: str, nproc: int) -> str:
        """The line `distrain run` prints when it runs such a script once, not `nproc` times."""
        if not self.line:
            return (
                f"{prog}: {script_name} starts its own workers (--self-starting); "
                f"running it once (not {nproc} {'copies' if nproc != 1 else 'copy'}), its "
                "children are the job"
            )
        return (
            f"{prog}: {script_name} starts its own workers ({self.kind} at line {self.line}); "
            f"running it once (not {nproc} {'copies' if nproc != 1 else 'copy'}), its "
            "children are the job"
        )


def _module_names(tree: ast.AST) -> tuple[dict[str, str], dict[str, str]]:
    """(names bound to a multiprocessing module → module, names bound to a starter → dotted name)"""
    modules: dict[str, str] = {}
    direct: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in _MODULES:
                    modules[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in _MODULES:  # from torch import multiprocessing as mp
                    modules[a.asname or a.name] = full
                elif node.module in _MODULES and a.name in _STARTERS:
                    direct[a.asname or a.name] = full
    # ctx = mp.get_context("spawn"): ctx.Process is the module's Process
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            owner = _owner_module(node.value.func, modules, "get_context")
            if owner:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        modules[target.id] = owner
    return modules, direct


def _owner_module(func: ast.expr, modules: dict[str, str], attr: str | None = None) -> str | None:
    """The multiprocessing module `func` is an attribute of (``mp.X``, ``mp.get_context().X``)."""
    if not isinstance(func, ast.Attribute) or (attr is not None and func.attr != attr):
        return None
    owner = func.value
    if (
        isinstance(owner, ast.Call)
        and isinstance(owner.func, ast.Attribute)
        and owner.func.attr == "get_context"
    ):
        owner = owner.func.value
    dotted = ast.unparse(owner)
    return modules.get(dotted) or (dotted if dotted in _MODULES else None)


def _in_loop(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, _LOOPS):
            return True
    return False


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round): the script run as a script, always true."""
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
        return False
    sides = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    return "__name__" in sides and bool(sides & {"'__main__'", '"__main__"'})


def _condition(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """The first condition `node` runs under (source text), "" when none but the main guard."""
    child = node
    while child in parents:
        parent = parents[child]
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            if not (
                isinstance(parent, ast.If) and _is_main_guard(parent.test) and child in parent.body
            ):
                return ast.unparse(parent.test)[:80]
        elif isinstance(parent, ast.ExceptHandler):
            return "an exception was raised"
        elif isinstance(parent, ast.Match):
            return f"match {ast.unparse(parent.subject)[:60]}"
        elif isinstance(parent, ast.BoolOp):
            return ast.unparse(parent)[:80]
        child = parent
    return ""


def find(script: str) -> SelfStart | None:
    """Where `script` starts its own workers, if it does (None: unreadable or it does not).

    A starter that always runs wins over one under a condition (``SelfStart.condition``).
    """
    try:
        with open(script, "rb") as f:
            tree = ast.parse(f.read(), filename=script)
    except (OSError, SyntaxError, ValueError):
        return None
    modules, direct = _module_names(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[SelfStart] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in direct:
            kind = direct[func.id]
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in _STARTERS
            and _owner_module(func, modules)
        ):
            kind = f"{_owner_module(func, modules)}.{func.attr}"
        else:
            continue
        if kind.endswith(".Process") and not _in_loop(node, parents):
            continue
        found.append(SelfStart(kind, node.lineno, _condition(node, parents)))
    return min(found, key=lambda s: (not s.sure, s.line)) if found else None


def decide(script: str, forced: bool | None) -> tuple[SelfStart | None, str]:
    """Whether to run `script` once (its children are the job), and the note to print.

    `forced` is ``--self-starting`` (True), ``--no-self-starting`` (False) or neither (None).
    Returns (what to run once for, or None: N copies as torchrun would; a note, maybe "").
    """
    found = find(script) if os.path.isfile(script) else None
    if forced is False:
        return None, ""
    if forced is True:
        return found or SelfStart("--self-starting", 0), ""
    if found is None or found.sure:
        return found, ""
    name = os.path.basename(script)
    return None, (
        f"{name} starts its own workers only if {found.condition} ({found.kind} at line "
        f"{found.line}): running it as torchrun would; pass --self-starting if it starts them "
        "in this run"
    )


def refuse_nodes(found: SelfStart, name: str, nnodes: str) -> None:
    """UsageError, one line, when a self-starting script is asked to run on more than one node.

    Each node would run the script once and its children would form a job of their own (with
    the script's own master address), so the nodes never make one job: the elastic and
    ``--hosts`` columns of docs/compatibility.md refuse it at start.
    """
    if int(str(nnodes).split(":")[-1]) > 1:
        what = found.kind if found.line == 0 else f"{found.kind} at line {found.line}"
        raise UsageError(
            f"{name} starts its own workers ({what}); with --nnodes {nnodes} every node would "
            "start a job of its own: run it on one node, or let distrain run start the workers "
            "(drop the spawn; read RANK and WORLD_SIZE from the environment)"
        )


def mark(env: dict[str, str]) -> None:
    """Tell the script's process that it starts its own workers (its side watches them form).

    Fresh interpreters (``--start-method spawn``, ``mp.spawn`` children) install the watch from
    the boot folder's sitecustomize, so that folder goes first on PYTHONPATH (once).
    """
    env[SELF_STARTING] = "1"
    boot_first(env)
