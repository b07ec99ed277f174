"""Whether a script surely never imports torch: then its workers start as torchrun's do.

A forked worker always has torch (the fork server is `distrain run` itself, after its ``import
torch``, and the agent's worker wrapper unpickles from torch), so a script that never imports it
paid for torch in every worker and started slower than under torchrun (issue 41). Such a script's
workers are fresh interpreters (``--start-method spawn``, torchrun's own path), said in no line:
nothing the script sees differs.

Wrong in one direction only: a script that does import torch but is read as torch-free would lose
the fast start (and its atomic save), so the answer is "torch-free" only when every import the
script can reach was seen and none can import torch:

- every ``import`` in the file, at any depth (a function's ``import torch`` counts);
- the script's own modules beside it, read the same way;
- an installed package: its files' import lines (tests folders aside; those inside
  triple-quoted strings, docstrings' examples, aside), and the packages those name, in turn; a
  file that imports torch anywhere, or passes ``"torch"`` to an importer (``import_module``,
  lazy loaders), counts as importing it; so does a compiled module whose bytes name torch
  (an import of it, or libtorch linked);
- a dynamic import the read cannot follow (``__import__``, ``importlib``, ``exec``, ``runpy``,
  ``pickle``, which may unpickle tensors), a relative import, or a package the read cannot find,
  or a read that outgrows its bounds (files, time), counts as importing torch.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys
import time

#: stdlib modules through which a script may import anything (or unpickle a tensor)
_OPEN_DOORS = frozenset(
    {
        "importlib",
        "runpy",
        "pickle",
        "shelve",
        "pkgutil",
        "code",
        "codeop",
        "zipimport",
        "doctest",
        "unittest",
        "pydoc",
        "marshal",
        "builtins",
        "site",
        "sitecustomize",
    }
)
#: calls that import what the read cannot name
_DYNAMIC_CALLS = frozenset(
    {"__import__", "exec", "eval", "import_module", "run_path", "run_module"}
)
#: a package file's import lines, and "torch" named as a string
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+([A-Za-z_][\w]*)|import[ \t]+([^\n#;]+))", re.M)
_TORCH_STRING = re.compile(
    rb"(?:import_module|__import__|find_spec|lazy\w*|Lazy\w*)\(\s*[\"']torch(?:\.[\w.]+)?[\"']"
)
_TORCH_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+torch[ \t.]|import[ \t]+torch\b)", re.M)
#: triple-quoted strings (docstrings' examples hold import lines that never run)
_TRIPLE = re.compile(rb'"""[\s\S]*?"""|' + rb"'''[\s\S]*?'''")
#: compiled modules, read as bytes
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
#: bounds on the read of installed packages; beyond them the script counts as importing torch
MAX_FILES = 6000
MAX_SECONDS = 0.3


def never_imports_torch(script: str) -> bool:
    """Whether `script` surely never imports torch (False whenever the read is not sure)."""
    here = os.path.dirname(os.path.realpath(script))
    deadline = time.monotonic() + MAX_SECONDS
    local_seen: set[str] = set()
    pending_packages: set[str] = set()
    local_queue = [os.path.realpath(script)]
    while local_queue:
        path = local_queue.pop()
        if path in local_seen:
            continue
        local_seen.add(path)
        names = _source_imports(path)
        if names is None:
            return False
        for name in names:
            verdict = _classify(name, here)
            if verdict == "torch":
                return False
            if isinstance(verdict, list):
                local_queue += verdict
            elif verdict == "installed":
                pending_packages.add(name)
    return _packages_torch_free(pending_packages, deadline)


def _source_imports(path: str) -> set[str] | None:
    """The top-level names a Python file imports (None: it imports what the read cannot name)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return None  # relative: a package's module, read as a script here
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called in _DYNAMIC_CALLS:
                return None
    return names


def _classify(name: str, here: str) -> str | list[str]:
    """ "torch" (or unknown), "stdlib", "installed", or the script's own files to read."""
    if name == "torch" or name in _OPEN_DOORS:
        return "torch"
    spec = importlib.machinery.PathFinder.find_spec(name, [here])
    if spec is not None:  # the script's folder comes first on a fresh sys.path
        return _local_files(spec)
    if name in sys.stdlib_module_names or name == "__future__":
        return "stdlib"
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return "torch"
    return "installed" if found is not None else "torch"


def _local_files(spec: importlib.machinery.ModuleSpec) -> str | list[str]:
    """A local module's file, or every file of a local package (its modules may be imported)."""
    if spec.origin in (None, "namespace") or not str(spec.origin).endswith(".py"):
        if spec.submodule_search_locations:  # a namespace package: its folders' files
            return [p for d in spec.submodule_search_locations for p in _py_files(d)] or "stdlib"
        return "torch"  # an extension module beside the script: unreadable
    if spec.submodule_search_locations:
        return _py_files(os.path.dirname(spec.origin)) or "stdlib"
    return [os.path.realpath(spec.origin)]


def _py_files(folder: str, also: tuple[str, ...] = ()) -> list[str]:
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in ("tests", "test", "__pycache__")]
        out += [os.path.join(root, f) for f in files if f.endswith((".py", *also))]
    return out


def _packages_torch_free(names: set[str], deadline: float) -> bool:
    """Whether none of the installed packages `names` (nor what they import) imports torch."""
    seen: set[str] = set()
    queue = sorted(names)
    files = 0
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        if name == "torch":
            return False
        # a package's own importlib/pickle use is no door here: a "torch" it could name is a string
        if name in sys.stdlib_module_names:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return False
        if spec is None:
            continue  # an optional import the package guards: absent here, it imports nothing
        paths = _package_files(spec)
        if paths is None:
            return False
        for path in paths:
            files += 1
            if files > MAX_FILES or time.monotonic() > deadline:
                return False
            try:
                with open(path, "rb") as f:
                    text = f.read()
            except OSError:
                return False
            if path.endswith(_EXTENSIONS):
                # compiled: one that imports torch or links libtorch names it in its bytes
                if b"torch" in text:
                    return False
                continue
            # on the whole text: a torch import is never missed for a string's sake
            if _TORCH_STRING.search(text) or _TORCH_IMPORT.search(text):
                return False
            for match in _IMPORT_LINE.finditer(_TRIPLE.sub(b"", text)):
                queue += _line_names(match)
    return True


def _package_files(spec: importlib.machinery.ModuleSpec) -> list[str] | None:
    """An installed module's files to read: Python sources and extension modules."""
    if spec.submodule_search_locations:
        return [p for d in spec.submodule_search_locations for p in _py_files(d, _EXTENSIONS)]
    origin = spec.origin or ""
    if origin.endswith((".py", *_EXTENSIONS)):
        return [origin]
    if origin in ("built-in", "frozen"):
        return []
    return None  # a module the read cannot look into


def _line_names(match: re.Match[bytes]) -> list[str]:
    """The top-level modules one import line names."""
    if match.group(1):
        return [match.group(1).decode()]
    names = []
    for part in match.group(2).split(b","):
        words = part.strip().split()
        if words and re.fullmatch(rb"[A-Za-z_][\w.]*", words[0]):
            names.append(words[0].split(b".")[0].decode())
    return names
