"""The requirements file the Dockerfile installs: the user's, checked, or one written for them.

The script's imports the image would lack (tools/export/needs.py) must each be installed by it:
a requirements file beside the script (or ``--requirements FILE``) must name them, or, without
one, ``requirements.txt`` is written beside the script with the versions installed here.  Where
that cannot be done (the Dockerfile goes to stdout and writes no file, or nothing installed here
provides a module) the export refuses in one line instead of writing an image that fails at its
first ``import``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from distrain.errors import UsageError
from distrain.tools.export.needs import Lack, lacks, listed, normalized


@dataclass
class Requirements:
    """The file the Dockerfile copies and installs (None: none), and files to write for it."""

    path: str | None
    write: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def given(named: str | None, script: str) -> str | None:
    """The user's requirements file: `named` (checked: relative, inside the project, a file) or
    requirements.txt beside the script; None when neither."""
    if named is not None:
        path = Path(named)
        if path.is_absolute() or ".." in path.parts:
            raise UsageError(
                f"--requirements {named}: give it relative to the project directory "
                "(it is copied into the image)"
            )
        if not path.is_file():
            raise UsageError(f"--requirements: no such file: {named}")
        return path.as_posix()
    beside = Path(script).parent / "requirements.txt"
    return beside.as_posix() if beside.is_file() else None


def for_image(script: str, named: str | None, install: str, writes: bool) -> Requirements:
    """What the image installs for `script` (`install`: distrain's pip argument, whose extras
    the image holds; `writes`: files may be written, the Dockerfile is not on stdout)."""
    found = given(named, script)
    bracket = re.search(r"\[([^\]]*)\]", install)  # '.[examples]': the image holds the extra
    extras = tuple(x.strip() for x in bracket.group(1).split(",")) if bracket else ()
    missing = lacks(Path(script), extras)
    if found is not None:
        names = listed(Path(found))
        uncovered = [m for m in missing if normalized(m.distribution or m.module) not in names]
        if uncovered:
            raise UsageError(
                f"{script} imports {_list(uncovered)}, which neither the base image nor {found} "
                f"installs: add {_them(uncovered)} to {found}"
            )
        return Requirements(found)
    if not missing:
        return Requirements(None)
    beside = (Path(script).parent / "requirements.txt").as_posix()
    unknown = [m for m in missing if m.distribution is None]
    if unknown:
        raise UsageError(
            f"{script} imports {_list(unknown)}, which the base image lacks and no package "
            f"installed here provides: name {_them(unknown, 'its package', 'their packages')} "
            f"in {beside} (or --requirements FILE)"
        )
    if not writes:
        raise UsageError(
            f"{script} imports {_list(missing)}, which the base image lacks: --out Dockerfile "
            f"writes {beside} for {_them(missing)} (or give --requirements FILE)"
        )
    text = "".join(f"{m.requirement()}\n" for m in missing)
    header = f"# written by `distrain export docker {script}`: its imports the base image lacks\n"
    return Requirements(
        beside,
        {beside: header + text},
        [
            f"{script} imports {_list(missing)}, which the base image lacks: {beside} installs "
            f"{_them(missing)}"
        ],
    )


def _list(modules: list[Lack]) -> str:
    return ", ".join(m.said() for m in modules)


def _them(modules: list[Lack], one: str = "it", many: str = "them") -> str:
    return one if len(modules) == 1 else many
