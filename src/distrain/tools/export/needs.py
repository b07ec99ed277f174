"""What the script imports that the image would lack.

The official PyTorch image holds torch, torchvision and torchaudio (and what they require);
the Dockerfile adds distrain (and its requirements).  Anything else the script imports, say
``sklearn``, fails at the image's first ``import`` unless a requirements file installs it.
The script is read, never run: its absolute imports (anywhere in it), less the standard library
and the project's own modules, are matched to the distributions installed on this machine
(``importlib.metadata``), whose requirement trees say what the image already holds.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: what the official pytorch/pytorch images install besides Python (tools/export/base_image.py)
BASE_IMAGE_HOLDS = ("torch", "torchvision", "torchaudio")


@dataclass(frozen=True)
class Lack:
    """A module the script imports and the image would not hold."""

    module: str
    #: the distribution that provides it here, and its version (None: none installed here)
    distribution: str | None = None
    version: str | None = None

    def requirement(self) -> str:
        """The requirements.txt line for it: the version installed here, pinned."""
        return f"{self.distribution}=={self.version}"

    def said(self) -> str:
        """`sklearn (scikit-learn 1.5.2)`, or the module alone when no package is known."""
        return (
            f"{self.module} ({self.distribution} {self.version})"
            if self.distribution
            else (self.module)
        )


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(script: Path) -> list[str]:
    """The top-level names of `script`'s absolute imports, in order, without the standard
    library and the modules beside it or in the working directory (the project's own)."""
    tree = ast.parse(script.read_bytes(), filename=str(script))
    optional = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.Try) and _guards_imports(guard)
        for part in guard.body
        for node in ast.walk(part)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in optional:  # `try: import apex / except ImportError`: the script copes
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in found and top != "__future__" and top not in sys.stdlib_module_names:
                found.append(top)
    return [name for name in found if not _local(name, script.parent)]


def _guards_imports(node: ast.Try) -> bool:
    """A ``try`` whose handlers catch a failed import (ImportError, its subclass, or all)."""
    caught = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(isinstance(k, ast.Name) and k.id in caught for k in kinds):
            return True
    return False


def _local(module: str, folder: Path) -> bool:
    return any(
        (place / f"{module}.py").is_file() or (place / module).is_dir()
        for place in (folder, Path.cwd())
    )


def image_holds(extras: tuple[str, ...] = ()) -> set[str]:
    """The distributions (normalized) the image holds: the base image's, distrain with
    `extras`, and everything they require, as installed here."""
    held: set[str] = set()
    todo = [(name, ()) for name in BASE_IMAGE_HOLDS] + [("distrain", extras)]
    while todo:
        name, wanted = todo.pop()
        if normalized(name) in held:
            continue
        held.add(normalized(name))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement, _, marker = line.partition(";")
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if extra is None or extra.group(1) in wanted:
                todo.append((re.split(r"[\s\[<>=!~(]", requirement.strip(), maxsplit=1)[0], ()))
    return held


def lacks(script: Path, extras: tuple[str, ...] = ()) -> list[Lack]:
    """The modules `script` imports that the image would not hold."""
    held = image_holds(extras)
    by_module = metadata.packages_distributions()
    out = []
    for module in imported_modules(script):
        dists = by_module.get(module, [])
        if any(normalized(d) in held for d in dists) or normalized(module) in held:
            continue
        if not dists:
            out.append(Lack(module))
            continue
        out.append(Lack(module, dists[0], metadata.version(dists[0])))
    return out


def listed(requirements: Path) -> set[str]:
    """The distributions (normalized) a requirements file names, one per requirement line."""
    names = set()
    for line in requirements.read_text(encoding="utf-8").splitlines():
        text = line.split("#")[0].strip()
        if text and not text.startswith("-"):
            names.add(normalized(re.split(r"[\s\[<>=!~;@(]", text, maxsplit=1)[0]))
    return names
