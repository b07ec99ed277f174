"""How the exported image gets distrain: a wheel built from this distrain's source, never an index.

No package named ``distrain`` on a public index belongs to this project: ``pip install distrain``
in a Dockerfile would install whatever someone registered under that name. So ``--install`` is
one of:

- ``auto`` (default): the project directory is distrain's own source tree → install it
  (``.``); otherwise build a wheel of the distrain that runs this command into ``wheels/`` in the
  project and install that file;
- a ``.whl`` file inside the project directory;
- ``.`` / ``.[extras]`` / ``./path``: a source tree inside the build context;
- a URL (``git+https://…``, ``https://…/x.whl``, ``name @ URL``).

A bare requirement (``distrain``, ``distrain==0.1``) is refused.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from distrain.errors import UsageError

#: where `auto` puts the wheel, relative to the project directory (the build context)
WHEEL_DIR = "wheels"
#: a requirement that names an index package: a name, extras, a version bound, nothing else
_INDEX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*([<>=!~;].*)?$")
#: building a wheel of ~140 files: ~7 s on a loaded 2-core machine
BUILD_TIMEOUT_S = 300


@dataclass
class Install:
    """What the Dockerfile copies and installs: `kind` is context, wheel or url."""

    kind: str
    spec: str  # the pip argument, relative to the build context for context/wheel
    built_from: str | None = None  # the source tree a wheel was built from (auto)


def _is_distrain_source(directory: Path) -> bool:
    # a line match, not tomllib: Python 3.10 has no TOML reader and distrain supports it
    try:
        text = (directory / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return (directory / "src" / "distrain").is_dir() and re.search(
        r'^name\s*=\s*"distrain"\s*$', text, re.M
    ) is not None


def distrain_source() -> Path | None:
    """The source tree (pyproject.toml + src/distrain) of the distrain running this, or None.

    An editable install or a checkout on PYTHONPATH has one; an installed wheel does not.
    """
    import distrain

    root = Path(distrain.__file__).resolve().parents[2]
    return root if _is_distrain_source(root) else None


def build_wheel(source: Path, dest: Path) -> Path:
    """Build distrain's wheel from `source` into `dest` (from a copy: the tree gets no build/)."""
    with tempfile.TemporaryDirectory(prefix="distrain-wheel-") as tmp:
        copy = Path(tmp) / "src"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(source / "src" / "distrain", copy / "src" / "distrain", ignore=ignore)
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (source / name).is_file():
                shutil.copy(source / name, copy / name)
        out = Path(tmp) / "out"
        # no build isolation when setuptools is here: nothing is downloaded; else pip fetches it
        isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
        argv = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            *isolation,
            "-q",
            "-w",
            str(out),
            str(copy),
        ]
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UsageError(
                f"building distrain's wheel from {source} took over {BUILD_TIMEOUT_S} s"
            ) from None
        wheels = sorted(out.glob("distrain-*.whl"))
        if res.returncode != 0 or not wheels:
            last = (res.stderr.strip().splitlines() or ["no wheel written"])[-1]
            raise UsageError(
                f"cannot build distrain's wheel from {source}: {last} (or pass --install FILE.whl)"
            )
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / wheels[0].name
        shutil.copy(wheels[0], target)
        return target


def resolve(install: str, project: Path, build: bool = True) -> Install:
    """The Install for `--install` in `project` (the build context); UsageError for an index name.

    With ``build=False`` an `auto` wheel is named but not built (for tests of the text alone).
    """
    if install == "auto":
        if _is_distrain_source(project):
            return Install("context", ".")
        source = distrain_source()
        if source is None:
            raise UsageError(
                "cannot find distrain's source to build its wheel (it runs from an installed "
                "wheel): pass --install "
                "wheels/distrain-<version>-py3-none-any.whl (a wheel copied into the project) or "
                "--install 'git+https://<your distrain repo>'"
            )
        if not build:
            from distrain import __version__

            return Install(
                "wheel", f"{WHEEL_DIR}/distrain-{__version__}-py3-none-any.whl", str(source)
            )
        wheel = build_wheel(source, project / WHEEL_DIR)
        return Install("wheel", wheel.relative_to(project).as_posix(), str(source))
    if install.startswith("."):
        return Install("context", install)
    if install.endswith(".whl") and "://" not in install:
        path = Path(install)
        if path.is_absolute() or ".." in path.parts:
            raise UsageError(
                f"--install {install}: give the wheel relative to the project directory (it is "
                "copied into the image)"
            )
        if not (project / path).is_file():
            raise UsageError(f"--install {install}: no such wheel in {project}")
        return Install("wheel", path.as_posix())
    if "://" in install or " @ " in install or install.startswith("git+"):
        return Install("url", install)
    if _INDEX_NAME.match(install):
        raise UsageError(
            f"--install {install!r} names a package on an index, and no index package belongs to "
            "this project: pip could install "
            "someone else's code. Use --install auto (a wheel of this distrain), a .whl file "
            "in the project, "
            "'.[extras]' in distrain's source tree, or a git+https:// URL"
        )
    raise UsageError(
        f"--install {install!r}: expected auto, a .whl file, a path starting with '.', or a URL"
    )
