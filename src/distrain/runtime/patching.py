"""The one registry of torch names distrain replaces in a worker (``distrain run --cpu``).

Every replacement of a torch attribute goes through :func:`replace` (a new value) or
:func:`wrap` (a wrapper that forwards to the original, ``functools.wraps`` kept), so the list of
what is patched is data, not scattered ``setattr`` calls: docs/torch_internals.md lists it, and
``tests/unit/runtime/test_patching.py`` compares every replacement's kind and signature with
torch's own.  Under :func:`recording` nothing is applied: the patches are only collected, which
lets the unit test see them without changing the test process's torch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Patch:
    """One replaced attribute: ``owner.name`` was `original` and is now `replacement`."""

    owner: Any
    name: str
    original: Any
    replacement: Any
    #: the replacement takes ``*args, **kwargs`` and hands them to the original, which binds them
    forwards: bool

    @property
    def where(self) -> str:
        """The dotted name of the patched attribute (``torch.cuda.stream``)."""
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", "?")
        module = getattr(self.owner, "__module__", None)
        if isinstance(self.owner, type) and module:
            owner = f"{module}.{owner}"
        return f"{owner}.{self.name}"


#: every patch applied in this process, in order
APPLIED: list[Patch] = []
_recorder: list[Patch] | None = None
_MISSING = object()


def replace(owner: Any, name: str, replacement: Any, *, forwards: bool = False) -> None:
    """Set ``owner.name`` to `replacement`, recording what it was."""
    original = getattr(owner, name, _MISSING)
    patch = Patch(owner, name, None if original is _MISSING else original, replacement, forwards)
    if _recorder is not None:
        _recorder.append(patch)
        return
    setattr(owner, name, replacement)
    APPLIED.append(patch)


def wrap(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` by ``make(original)``, a forwarding wrapper with the original's name."""
    original = getattr(owner, name)
    replace(owner, name, functools.wraps(original)(make(original)), forwards=True)


@contextlib.contextmanager
def recording() -> Iterator[list[Patch]]:
    """Collect the patches made inside the block without applying any of them."""
    global _recorder
    previous, _recorder = _recorder, []
    try:
        yield _recorder
    finally:
        _recorder = previous


def recording_active() -> bool:
    """True inside :func:`recording` (an installer then touches nothing else either)."""
    return _recorder is not None


def like(original: Any, impl: Callable[..., Any]) -> Callable[..., Any]:
    """`impl` under `original`'s signature: arguments bind (or raise TypeError) as they would there."""
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return impl

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        return impl(*bound.args, **bound.kwargs)

    call.__signature__ = signature  # type: ignore[attr-defined]  # what inspect reports: every call binds it
    call.__name__, call.__qualname__ = original.__name__, original.__qualname__
    call.__doc__ = impl.__doc__ or f"distrain run --cpu stand-in for {original.__qualname__}"
    if hasattr(original, "__wrapped__"):
        # a decorated original (``@contextmanager`` torch.cuda.use_mem_pool) has one, and Dynamo
        # reads it while tracing any torch call; unwrapped, the stand-in leads to itself
        call.__wrapped__ = impl  # type: ignore[attr-defined]
    return call
