"""`distrain run --cpu` puts this folder first on PYTHONPATH: every fresh Python process of the
job (torchrun workers, torch.multiprocessing.spawn children, spawned DataLoader workers) installs
the CUDA-on-CPU rehearsal the moment it imports torch.  Any other sitecustomize still runs.
For a script that starts its own workers (``DISTRAIN_SELF_STARTING``, with or without --cpu)
it installs distrain.runtime.selfstart: the watch over its children's group.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Run the sitecustomize this one shadows (e.g. Debian's), as Python would have."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _install_rehearsal() -> None:
    argv = list(sys.argv)
    try:
        from distrain.runtime import rehearse
    except ImportError:  # distrain itself is importable from this file's tree
        sys.path.append(os.path.abspath(os.path.join(_HERE, *[os.pardir] * 4)))
        from distrain.runtime import rehearse
    if sys.argv != argv:  # importing distrain strips a legacy --local_rank; the script reads it
        sys.argv[:] = argv
        sys.modules["distrain.cluster.legacy_launch"].forget_launcher_argv()
    rehearse.install()


def _install_selfstart() -> None:
    try:
        from distrain.runtime import selfstart
    except ImportError:
        sys.path.append(os.path.abspath(os.path.join(_HERE, *[os.pardir] * 4)))
        from distrain.runtime import selfstart
    selfstart.install()


def _after_torch() -> None:
    if os.environ.get("DISTRAIN_CPU_REHEARSAL"):
        _install_rehearsal()
    if os.environ.get("DISTRAIN_SELF_STARTING"):
        _install_selfstart()  # now torch is there: its init_process_group is hooked too


class _WhenTorchIsImported(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_torch = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            exec_torch(module)
            _after_torch()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_chain()
# the fork server (DISTRAIN_PRELOAD) stays plain: its forked workers install the rehearsal themselves
_WANTED = os.environ.get("DISTRAIN_CPU_REHEARSAL") or os.environ.get("DISTRAIN_SELF_STARTING")
if _WANTED and not os.environ.get("DISTRAIN_PRELOAD"):
    if os.environ.get("DISTRAIN_SELF_STARTING"):
        _install_selfstart()  # multiprocessing's hooks before the script starts any child
    if "torch" in sys.modules:
        _after_torch()
    else:
        sys.meta_path.insert(0, _WhenTorchIsImported())
