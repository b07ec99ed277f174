"""Run a script file as ``__main__`` the way ``python script.py`` does, in a forked worker.

``runpy.run_path`` is close but not the same: it keeps ``__file__`` as given (Python 3.9+ makes
``__main__.__file__`` absolute, so a script that chdirs and then finds its files through
``__file__`` failed only under distrain, issue 41), and it sets ``sys.argv[0]`` to the path it
ran, where Python keeps the path as typed. Here, as Python does it (3.11, measured:
tests/jobs/test_fidelity_probe.py): ``__file__`` is the current folder joined with the path as
given, not normalised (``/work/./train.py``); ``sys.argv[0]`` is left as it is; ``__loader__``
is a ``SourceFileLoader``, ``__spec__``/``__package__``/``__cached__`` are None; and, as runpy
does, a fresh ``__main__`` module stands in ``sys.modules`` while the script runs.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import sys
import types


def main_file(script: str) -> str:
    """The ``__file__`` that ``python script`` gives its main module."""
    return script if os.path.isabs(script) else os.path.join(os.getcwd(), script)


def run_as_main(script: str) -> None:
    """Run `script` as ``__main__``; its exceptions (SystemExit included) propagate."""
    path = main_file(script)
    with io.open_code(path) as f:  # bytes: compile() honours the file's coding cookie
        code = compile(f.read(), path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __package__=None,
        __spec__=None,
        __builtins__=builtins,
    )
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - running the user's script is the point
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous
