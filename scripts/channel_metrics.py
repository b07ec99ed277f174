"""The ``worker_launcher_channels`` figure of scripts/structure_metrics.py, from the code.

A channel is a file that the worker side and the launcher side both touch, named in one of the
modules that both sides share (:data:`SHARED_FILES`: ``distrain/contract.py``,
``distrain/events/stream.py`` and the coordination files of ``distrain/coordination/``):

1. the files: a module-level string constant that looks like a file name (``FILE =
   "events.jsonl"``, ``STOP_MARK = "stopped.txt"``), and a module-level function that joins a
   file name into a path (``ft_group_file`` → ``group.{}``); a function of those modules that uses
   one (``emit`` → ``stream`` → ``FILE``, ``claim_stop`` → ``STOP_MARK``) stands for it too;
2. the worker side: every module reachable in the import graph (lazy imports included) from
   the workers' entry points (:data:`WORKER_ROOTS`), outside launch/ and the shared modules;
   the launcher side: every module under launch/;
3. a file is one channel when a worker-side module and a launcher-side module each name one of
   its names (an import from those modules, or ``events.X``).

What it does not see: a file named only by literals in the two sides' own modules (the old
step-breakdown ``rank-<R>.json`` files were such), and the direction (a coordination file both
sides use counts as well: the figure over-counts rather than hides).  torch's own error file
(``TORCHELASTIC_ERROR_FILE``, written for torch's agent) is a variable, not a file name, and
is not counted.  Each coordination file says why it is not an event (:data:`WHY_NOT_AN_EVENT`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

#: where every worker process starts: `import distrain` + init(), the fast start's forked child,
#: the fork server, the --cpu rehearsal's boot, the fresh-interpreter fallback's child
WORKER_ROOTS = (
    "distrain",
    "distrain.worker.init",
    "distrain.worker.fast_start.forked",
    "distrain.worker.fast_start.preload",
    "distrain.worker.rehearse.boot.sitecustomize",
)
#: the modules both sides share: they define the names, and are on neither side
SHARED = (
    "distrain.contract",
    "distrain.coordination",
    "distrain.coordination.stop_claim",
    "distrain.coordination.replica_marks",
    "distrain.events",
    "distrain.events.stream",
    "distrain.settings",
    "distrain.errors",
)
#: the files of SHARED that name files (the coordination files moved out of contract.py)
SHARED_FILES = (
    "contract.py",
    "events/stream.py",
    "coordination/stop_claim.py",
    "coordination/replica_marks.py",
)
#: a file name: ``x.json``, ``.jsonl``, ``.txt``, ``step.{}`` (a number appended),
#: ``watchdog-{rank}``
_FILE_NAME = re.compile(r"^[\w{}<>-]+\.(json|jsonl|txt)$|^[a-z]+\.\{\}(\.\{\})*$|^[a-z]+-\{\w*\}$")


def _literal(node: ast.AST) -> str | None:
    """A string constant, or an f-string with its fields as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def shared_files(pkg: Path) -> dict[str, set[str]]:
    """{name in contract.py/events.py: the files it stands for}."""
    direct: dict[str, set[str]] = {}
    uses: dict[str, set[str]] = {}
    for module in SHARED_FILES:
        source = pkg / module
        for node in ast.parse(source.read_text()).body if source.exists() else []:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                name, text = getattr(node.targets[0], "id", None), _literal(node.value)
                if name and text and _FILE_NAME.match(text):
                    direct.setdefault(name, set()).add(text)
            elif isinstance(node, ast.FunctionDef):
                uses[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and ast.unparse(call.func) == "os.path.join":
                        for arg in call.args[1:]:
                            text = _literal(arg)
                            if text and _FILE_NAME.match(text):
                                direct.setdefault(node.name, set()).add(text)
    files = {name: set(found) for name, found in direct.items()}
    changed = True
    while changed:  # a function stands for the files of the names it uses
        changed = False
        for fn, names in uses.items():
            found = set().union(*(files.get(n, set()) for n in names if n != fn))
            if found - files.get(fn, set()):
                files.setdefault(fn, set()).update(found)
                changed = True
    return files


def _names_used(path: Path) -> set[str]:
    """Names a module takes from contract/events: imported, or as ``events.X``/``contract.X``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in (
            "contract",
            "events",
            "stop_claim",
            "replica_marks",
        ):
            names.update(a.name for a in node.names)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("contract", "events")
        ):
            names.add(node.attr)
    return names


#: why each coordination file that is still a channel is not an event (`-v` prints it beside the
#: channel): every one decides what a process does next, where the event stream only reports
WHY_NOT_AN_EVENT = {
    "stopped.txt": "a claim (one O_EXCL creation): which stopper signals the launcher; why it "
    "stopped is a `stop` event",
    "group.{}": "a replica group's state, one fixed-layout file per group (coordination/"
    "replica_marks.py): its committed step, rewritten in place at every committed step (one "
    "20-byte pwrite at offset 0: as events, one stream line per step per group), and its start, "
    "end and done marks (one byte each at its own offset, each a single pwrite). Other groups "
    "poll it (the start every 20 ms at a first quorum, the end and done marks while they serve "
    "a late group, the step before training alone: worker/replicas/sync.py, rejoin.py) and "
    "decide what to do next, where the event stream only reports; the end mark is the "
    "launcher's (the group's processes are gone), the launcher reads a lost group's step for "
    "its line, and every mark is carried between nodes through the store "
    "(launch/replicas/nodes.py); as events every poll of every group would rescan the stream",
}


def worker_launcher_channels(
    pkg: Path, graph: dict[str, set[str]], module_path: dict[str, Path]
) -> list[str]:
    """`file: worker modules | launcher modules` for each channel (see the module docstring)."""
    files = shared_files(pkg)
    seen: set[str] = set()
    todo = [m for m in WORKER_ROOTS if m in graph]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(graph.get(module, ()))
    worker = {m for m in seen if not m.startswith("distrain.launch") and m not in SHARED}
    launcher = {m for m in graph if m.startswith("distrain.launch.")}
    touched: dict[str, tuple[set[str], set[str]]] = {}
    for side, modules in ((0, worker), (1, launcher)):
        for module in modules:
            for name in _names_used(module_path[module]):
                for file in files.get(name, ()):
                    touched.setdefault(file, (set(), set()))[side].add(module)
    return [
        f"{file}: {', '.join(sorted(w))} | {', '.join(sorted(launch))}"
        + (f" — not an event: {WHY_NOT_AN_EVENT[file]}" if file in WHY_NOT_AN_EVENT else "")
        for file, (w, launch) in sorted(touched.items())
        if w and launch
    ]
