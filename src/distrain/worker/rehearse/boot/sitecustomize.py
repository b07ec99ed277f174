"""`distrain run --cpu` puts this folder first on PYTHONPATH: every fresh Python process of the
job (torchrun workers, torch.multiprocessing.spawn children, spawned DataLoader workers) installs
the CUDA-on-CPU rehearsal the moment it imports torch.  Any other sitecustomize still runs.
For a script that starts its own workers (``DISTRAIN_SELF_STARTING``, with or without --cpu)
it installs distrain.worker.self_start: the watch over its children's group.  Under --replicas
(``DISTRAIN_REPLICA_GROUP``) it routes every optimizer's step through the replica commit
(distrain.worker.replicas.optimizers).

Under `distrain run --start-method spawn` (fresh interpreters) it is on PYTHONPATH for one more
reason: a plain script's uncaught exception reaches the agent's error file
(``TORCHELASTIC_ERROR_FILE``), so `distrain run`'s last line names the cause, as it does with the
fast start.  That takes no hook the script could see: an ``atexit`` function reads
``sys.last_value``, which the interpreter sets for an uncaught exception before finalizing.
Then, with neither --cpu nor a self-starting script, this folder leaves ``sys.path`` and
PYTHONPATH again, so the script sees what torchrun's worker sees.
"""

# Environment boundary (scripts/structure_metrics.py ENV_BOUNDARY): runs at interpreter start,
# before distrain is importable: the environment is all it has.
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> ModuleType | None:
    """Run the sitecustomize this one shadows (e.g. Debian's), as Python would have; it, or None."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _install_rehearsal() -> None:
    argv = list(sys.argv)
    try:
        from distrain.worker import rehearse
    except ImportError:  # distrain itself is importable from this file's tree
        sys.path.append(os.path.abspath(os.path.join(_HERE, *[os.pardir] * 4)))
        from distrain.worker import rehearse
    if sys.argv != argv:  # importing distrain strips a legacy --local_rank; the script reads it
        sys.argv[:] = argv
        sys.modules["distrain.cluster.legacy_launch"].forget_launcher_argv()
    rehearse.install()


def _install_selfstart() -> None:
    try:
        from distrain.worker import self_start as selfstart
    except ImportError:
        sys.path.append(os.path.abspath(os.path.join(_HERE, *[os.pardir] * 4)))
        from distrain.worker import self_start as selfstart
    selfstart.install()


def _install_replicas() -> None:
    try:
        from distrain.worker.replicas import optimizers
    except ImportError:
        sys.path.append(os.path.abspath(os.path.join(_HERE, *[os.pardir] * 4)))
        from distrain.worker.replicas import optimizers
    optimizers.install()


def _after_torch() -> None:
    if os.environ.get("DISTRAIN_CPU_REHEARSAL"):
        _install_rehearsal()
    if os.environ.get("DISTRAIN_SELF_STARTING"):
        _install_selfstart()  # now torch is there: its init_process_group is hooked too
    if os.environ.get("DISTRAIN_REPLICA_GROUP"):  # --replicas: optimizer steps are committed
        _install_replicas()


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


def _record_uncaught_at_exit() -> None:
    """Write the agent's error file for the exception that ended this interpreter, if any.

    Not for a peer's failure (a rank that only lost its peer is not the cause), and never over a
    file already written (``@record``, distrain's own hooks: theirs stands).
    """
    err = getattr(sys, "last_value", None)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if err is None or not path or os.path.exists(path):
        return
    try:
        from distrain.worker.lifecycle.failure import is_peer_failure, write_error_file
    except ImportError:
        sys.path.append(os.path.abspath(os.path.join(_HERE, *[os.pardir] * 4)))
        from distrain.worker.lifecycle.failure import is_peer_failure, write_error_file
    if not is_peer_failure(err):
        from distrain.settings import for_report

        write_error_file(path, err, err.__traceback__, for_report())


def _leave(chained: ModuleType | None) -> None:
    """Take this folder off sys.path and PYTHONPATH: only the error file wanted it here."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if parts and os.path.abspath(parts[0] or os.curdir) == _HERE:
        if parts[1:]:
            os.environ["PYTHONPATH"] = os.pathsep.join(parts[1:])
        else:
            del os.environ["PYTHONPATH"]
    if chained is not None:  # `sitecustomize` is the one Python would have imported
        sys.modules["sitecustomize"] = chained
    # else this module stays `sitecustomize` (the import in progress needs its entry), as
    # docs/environment.md says


def _die_with_the_launcher() -> None:
    """A worker the agent started fresh dies with `distrain run`, as a forked worker does.

    A forked worker holds to the launcher by death signals (the fork server's chain); a fresh
    one (``--start-method spawn``, and a script that never imports torch, which starts that way)
    would outlive a SIGKILLed launcher, as torchrun's workers do. Only the agent's own child:
    the script's children have theirs (docs/self_starting.md). Invisible to the script.
    """
    launcher = os.environ.get("DISTRAIN_LAUNCHER_PID", "")
    if not (sys.platform.startswith("linux") and launcher.isdigit()):
        return
    if os.getppid() != int(launcher):
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    if os.getppid() != int(launcher):  # the launcher died before the call
        os.kill(os.getpid(), signal.SIGKILL)


_CHAINED = _chain()
if os.environ.get("TORCHELASTIC_ERROR_FILE") and os.environ.get("DISTRAIN_LAUNCHER"):
    import atexit

    _die_with_the_launcher()
    atexit.register(_record_uncaught_at_exit)
# the fork server (DISTRAIN_PRELOAD) stays plain: its forked workers install the rehearsal
# themselves
_WANTED = (
    os.environ.get("DISTRAIN_CPU_REHEARSAL")
    or os.environ.get("DISTRAIN_SELF_STARTING")
    or os.environ.get("DISTRAIN_REPLICA_GROUP")
)
if _WANTED and not os.environ.get("DISTRAIN_PRELOAD"):
    if os.environ.get("DISTRAIN_SELF_STARTING"):
        _install_selfstart()  # multiprocessing's hooks before the script starts any child
    if "torch" in sys.modules:
        _after_torch()
    else:
        sys.meta_path.insert(0, _WhenTorchIsImported())
elif not os.environ.get("DISTRAIN_PRELOAD"):
    _leave(_CHAINED)
