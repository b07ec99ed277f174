"""docs/torch_internals.md lists every private name of torch (or Python) that src/distrain uses.

The source is scanned with ``ast``: private components of torch imports, attribute accesses
``x._name`` on anything but ``self``/``cls`` (or a class of the same file), ``getattr``/
``hasattr``/``setattr`` with a private name, and strings naming a private torch module or a
private global (DCP's allowed pickle globals).  Each (file, name) found must stand in a row of
the doc for that file, and each row's names must still be found: the list stays true both ways.
A private attribute of a distrain object reached from another module fails here too: it wants
a public method or property, not a row in the doc.
"""

from __future__ import annotations

import ast
import re

from helpers import REPO

SRC = REPO / "src" / "distrain"
DOC = REPO / "docs" / "torch_internals.md"
_PRIVATE = re.compile(r"_[A-Za-z]\w*")
_TORCH_PATH = re.compile(r"torch(\.\w+)+")
_ATTR_CALLS = ("getattr", "hasattr", "setattr")


def _private(name: str) -> bool:
    # names distrain stashes on foreign objects carry its own prefix: they are its own
    return bool(_PRIVATE.fullmatch(name)) and not name.startswith(("__", "_distrain"))


def _own_receiver(node: ast.expr, classes: set[str]) -> bool:
    return isinstance(node, ast.Name) and (node.id in ("self", "cls") or node.id in classes)


def _module_names(module: str) -> set[str]:
    return (
        {part for part in module.split(".") if _private(part)}
        if module.split(".")[0] == "torch"
        else set()
    )


def _attributes_defined(tree: ast.AST) -> set[str]:
    """Attributes a module gives its own objects: ``self._x = ...``, ``cls._x = ...``, class."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Attribute) and _own_receiver(target.value, set()):
                    names.add(target.attr)
    return names


def private_uses(tree: ast.AST, own_strings: frozenset[str] = frozenset()) -> set[str]:
    """The private names one module's syntax tree uses of objects it does not define.

    A string equal to one of `own_strings` (names distrain defines) is distrain's own: a
    registry key, a getattr on a distrain object.
    """
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    own_attrs = _attributes_defined(tree)  # this module's own objects' privates are its to use
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _module_names(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= _module_names(node.module)
            if node.module.split(".")[0] == "torch":
                found |= {a.name for a in node.names if _private(a.name)}
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and not _own_receiver(node.value, classes)
            and node.attr not in own_attrs
        ):
            found.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTR_CALLS
        ):
            if len(node.args) >= 2 and not _own_receiver(node.args[0], classes):
                name = node.args[1]
                if (
                    isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and _private(name.value)
                ):
                    found.add(name.value)  # an attribute access, whatever distrain defines
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _TORCH_PATH.fullmatch(node.value):
                found |= _module_names(node.value)
            elif _private(node.value) and node.value not in own_strings:
                found.add(node.value)
    return found


def scanned() -> dict[str, set[str]]:
    """file (repo-relative) -> the private names it uses of objects it does not define."""
    own = frozenset(distrain_defined())
    result: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        names = private_uses(ast.parse(path.read_text(), str(path)), own)
        if names:
            result[str(path.relative_to(REPO))] = names
    return result


def distrain_defined() -> set[str]:
    """Private names distrain defines (functions, classes, module globals, self/cls attributes)."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                    elif isinstance(target, ast.Attribute) and _own_receiver(target.value, set()):
                        names.add(target.attr)
    return {n for n in names if _private(n)}


def documented() -> dict[str, set[str]]:
    """file -> private names, from the table rows of docs/torch_internals.md."""
    result: dict[str, set[str]] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].startswith("`src/"):
            continue
        names: set[str] = set()
        for code in re.findall(r"`([^`]+)`", cells[1]):
            names |= {part for part in re.split(r"[^\w]+", code) if _private(part)}
        result.setdefault(cells[0].strip("`"), set()).update(names)
    return result


def test_every_private_torch_or_python_name_is_listed() -> None:
    uses = scanned()
    listed = documented()
    missing = {
        f: sorted(names - listed.get(f, set()))
        for f, names in uses.items()
        if names - listed.get(f, set())
    }
    assert not missing, (
        f"private names used but not in docs/torch_internals.md: {missing}. If torch's or "
        "Python's, add a row "
        "(what, why, what breaks, which test catches it); if distrain's own, reach it through a "
        "public method or property"
    )


def test_every_listed_name_is_still_used() -> None:
    uses = scanned()
    stale = {
        f: sorted(names - uses.get(f, set()))
        for f, names in documented().items()
        if names - uses.get(f, set())
    }
    assert not stale, f"docs/torch_internals.md lists names these files no longer use: {stale}"


def test_the_scan_sees_each_kind_of_use() -> None:
    """The scanner itself: an import, an attribute, a getattr and a module string each count."""
    source = """
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.distributed_c10d import _get_default_store
import torch._dynamo
MODULES = ["torch._inductor"]
class Mine:
    _own = 1
    def f(self, module, ctx, other):
        self._fine = Mine._own + other._fine
        getattr(module, "_reset_parameters", None)
        return module._parameters, ctx._monitor, module._distrain_state
"""
    assert private_uses(ast.parse(source)) == {
        "_checkpoint", "_get_default_store", "_dynamo", "_inductor", "_reset_parameters",
                                               "_parameters", "_monitor",
    }  # fmt: skip
