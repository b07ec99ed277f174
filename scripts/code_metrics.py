"""Two figures of scripts/structure_metrics.py read from the code: scanners and feature words.

- ``command_line_scanners``: the modules (places) whose functions walk a command line
  themselves, found by what they do to it, whatever it is called: a *leading-dash test* on an
  element of a sequence.  An element is a subscript (``script[0]``, ``argv[1:]``), a name bound
  by a ``for`` or a comprehension in the function (``for opt in ssh_opts``), or a name assigned
  one (``tok = argv[i]``, ``tok = args.pop(0)``), seen through method calls
  (``v.strip().startswith("-")``).  The tests: ``<element>.startswith("-…")`` (or ``"--"``…),
  ``<element> == "-x"`` / ``!=`` / ``in ("-x", …)``, and ``"-x" in <any sequence>``.  A function
  testing one string it was given (``name.startswith("--")`` on a parameter) does not walk a
  line and is not counted; a scanner of another program's command line (ssh's options, python's
  ``-c``) is: the figure over-counts rather than hides, and ``-v`` lists each function.  Not a
  command line: the items of a list split at a separator that is not a blank
  (``visible.split(",")``: CUDA_VISIBLE_DEVICES's ``-1``, a SLURM hostlist's ``1-3``), and a
  lone dash looked for inside an element (``"-" in rng``: a range, not an option).  Nested
  functions count for themselves, not for the one around them.  The figure counts modules: the
  goal is one place, launch/command_line.py, whose helpers (the split on torch's own parser, the
  script's tail) everything else reads a command line through.
- ``feature_words``: the words that name an optional feature (:data:`FEATURE_WORDS`) in the core
  launcher and worker modules (:data:`CORE`): the launcher's and worker's own modules outside
  their feature folders, and the core checkpointer.  A word in a comment or docstring counts
  too: the core that explains a feature still carries it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

#: a feature's words, as the code spells them (identifiers, options, prose); `replicate`,
#: `replicated` are HSDP's and DDP's words (torch's own), not the replica groups'
FEATURE_WORDS = {
    "hosts": r"\bhosts\b|hostfile|\bssh\b",
    "replicas": r"replica(?!t)s?|torchft|lighthouse",
    "fast start": r"fast[_ ]start|forkserver|fork server|fork_server",
    "rehearsal": r"rehears\w*|--cpu\b|\bcpu_rehearsal",
    "self-start": r"self[_-]start\w*|selfstart\w*",
    "dry-run": r"dry[_-]run",
}
#: the core modules: `launch/*.py` and `worker/*.py` (the folders' roots, not their feature
#: sub-folders fast_start/, rehearse/, self_start/, replicas/, hosts/) and the checkpointer
CORE = ("launch/*.py", "worker/*.py", "checkpoint/checkpointer.py")


def _root(node: ast.AST) -> ast.AST:
    """What a chain of method calls starts from: ``v`` of ``v.strip().lower()``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node


def _dash(node: ast.AST) -> bool:
    """A string constant (or a tuple/list of them) that starts with a dash."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("-")
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_dash(e) for e in node.elts)
    return False


def _options(node: ast.AST) -> bool:
    """Options only: ``"--x"``, ``["--"]``.  A list with a word in it (``["-m", "distrain.cli",
    "run"]``) compared whole is a fixed command matched, not an option looked for."""
    if isinstance(node, ast.Tuple | ast.List):
        return bool(node.elts) and all(_dash(e) for e in node.elts)
    return _dash(node)


def _option(node: ast.AST) -> bool:
    """Not a lone ``"-"``: ``"-" in text`` looks for a dash inside a string (a range ``1-3``)."""
    return not (isinstance(node, ast.Constant) and node.value == "-")


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function outside the functions nested in it."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _split_items(node: ast.AST) -> bool:
    """``text.split(",")``: the items of a delimited list (device numbers, a hostlist's ranges),
    not the words of a command line (``shlex.split``, ``text.split()`` and ``split(" ")`` are)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("split", "rsplit")
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.strip() != ""
    )


def _loop_names(nodes: list[ast.AST]) -> set[str]:
    """Names bound by the loops and comprehensions among `nodes` (not over a delimited list)."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.For | ast.comprehension) and not _split_items(node.iter):
            names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return names


def _taken(node: ast.AST) -> bool:
    """One element taken out of a sequence: ``argv[i]``, ``args.pop(0)``."""
    if isinstance(node, ast.Subscript):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "pop"
    )


def _element_names(nodes: list[ast.AST]) -> set[str]:
    """The loop names, and the names assigned an element (``tok = argv[i]``)."""
    names = _loop_names(nodes)
    for node in nodes:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            if _taken(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _is_element(node: ast.AST, loop_names: set[str]) -> bool:
    node = _root(node)
    return isinstance(node, ast.Subscript) or (isinstance(node, ast.Name) and node.id in loop_names)


def dash_tests(fn: ast.AST) -> list[int]:
    """Lines of `fn` (not its nested functions) with a leading-dash test on a sequence's element."""
    nodes = _own_nodes(fn)
    loop_names = _element_names(nodes)
    lines = []
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and node.args
            and _dash(node.args[0])
            and _is_element(node.func.value, loop_names)
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides, sides[1:], strict=False):
                if isinstance(op, ast.In | ast.NotIn) and _dash(left) and _option(left):
                    lines.append(node.lineno)  # "-x" in <a sequence>, whatever its name
                elif isinstance(op, ast.In | ast.NotIn) and (
                    _dash(right) and _is_element(left, loop_names)
                ):
                    lines.append(node.lineno)  # an element in ("-h", "--help")
                elif isinstance(op, ast.Eq | ast.NotEq) and (
                    (_options(right) and _is_element(left, loop_names))
                    or (_options(left) and _is_element(right, loop_names))
                ):
                    lines.append(node.lineno)
    return sorted(set(lines))


def command_line_scanners(pkg: Path) -> list[str]:
    """``file: function:lines …`` of each module with a leading-dash test (module docstring)."""
    found = []
    for path in sorted(pkg.rglob("*.py")):
        tree = ast.parse(path.read_text())
        functions = []
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = dash_tests(fn)
                if lines:
                    functions.append(f"{fn.name}:{','.join(map(str, lines))}")
        if functions:
            found.append(f"{path.relative_to(pkg.parent).as_posix()}: {' '.join(functions)}")
    return found


def feature_words(pkg: Path) -> dict[str, dict[str, int]]:
    """{core module: {feature: occurrences}} for the core modules that name a feature."""
    found: dict[str, dict[str, int]] = {}
    for pattern in CORE:
        for path in sorted(pkg.glob(pattern)):
            text = path.read_text()
            counts = {
                feature: len(re.findall(rx, text, re.I)) for feature, rx in FEATURE_WORDS.items()
            }
            counts = {k: v for k, v in counts.items() if v}
            if counts:
                found[path.relative_to(pkg.parent).as_posix()] = counts
    return found
