"""The one registry of the torch and Python names distrain replaces in a process.

Every replacement of a torch or stdlib attribute goes through :func:`replace` (a new value),
:func:`wrap` (a wrapper that forwards to the original, ``functools.wraps`` kept) or
:func:`temporarily` (for the length of a ``with`` block), each made on behalf of a *feature*
(``rehearse``, ``fast_start``, ...).  So what is patched is data: :func:`applied` lists it per
feature, :func:`remove`/:func:`restore` put a patch or a whole feature's patches back, and
docs/torch_internals.md ("Patched names") lists every name, which
``tests/unit/process/test_patching.py`` checks.

A name is installed once: installing it again for the same feature is a no-op that returns the
patch in place (installers run from several entry points: the fast start's worker, the boot
sitecustomize, a forked child that inherited them), and a second feature patching the same name
is an error (stacked wrappers whose order depends on who came first is what this prevents).
Names that several features need to hook have one owner here instead: ``init_process_group``
(:func:`on_init_process_group`) and ``sys.excepthook`` (:func:`on_uncaught`) are each replaced
once, by the ``hooks`` feature, with a function that calls the features' hooks in a fixed order
(:data:`GROUP_ORDER`, :data:`UNCAUGHT_ORDER`) whichever feature registered first.

Under :func:`recording` nothing is applied: the patches are only collected, which lets the unit
test see them without changing the test process's torch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

#: the features that patch names (``hooks`` is this registry's own: the shared wrappers)
FEATURES = (
    "rehearse",
    "fast_start",
    "self_start",
    "replicas",
    "comm_hooks",
    "atomic_save",
    "store_port",
    "hooks",
)


class PatchError(RuntimeError):
    """A patch that would stack on another feature's, or be removed out of order."""


@dataclass(frozen=True, eq=False)
class Patch:
    """One replaced attribute: ``owner.name`` was `original` and is now `replacement`."""

    owner: Any
    name: str
    original: Any  # None where the owner had no such attribute (see `existed`)
    replacement: Any
    #: the replacement takes ``*args, **kwargs`` and hands them to the original, which binds them
    forwards: bool
    feature: str
    existed: bool = True
    #: the owner (a class) had the name in its own ``__dict__``, not inherited
    own: bool = True

    @property
    def where(self) -> str:
        """The dotted name of the patched attribute (``torch.cuda.stream``)."""
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", "?")
        module = getattr(self.owner, "__module__", None)
        if isinstance(self.owner, type) and module:
            owner = f"{module}.{owner}"
        return f"{owner}.{self.name}"


#: every patch in place in this process, oldest first
APPLIED: list[Patch] = []
_recorder: list[Patch] | None = None
_MISSING = object()


def _active(owner: Any, name: str) -> Patch | None:
    """The newest patch in place of ``owner.name``."""
    return next((p for p in reversed(APPLIED) if p.owner is owner and p.name == name), None)


def _apply(owner: Any, name: str, replacement: Any, feature: str, forwards: bool) -> Patch:
    if feature not in FEATURES:
        raise PatchError(f"unknown feature {feature!r} (one of {', '.join(FEATURES)})")
    original = getattr(owner, name, _MISSING)
    own = not isinstance(owner, type) or name in vars(owner)
    existed = original is not _MISSING
    patch = Patch(
        owner, name, original if existed else None, replacement, forwards, feature, existed, own
    )
    if _recorder is not None:
        _recorder.append(patch)
        return patch
    setattr(owner, name, replacement)
    APPLIED.append(patch)
    return patch


def replace(
    owner: Any, name: str, replacement: Any, *, feature: str, forwards: bool = False
) -> Patch:
    """Set ``owner.name`` to `replacement` for `feature`, once; the patch in place is returned."""
    current = None if _recorder is not None else _active(owner, name)
    if current is not None:
        if current.feature == feature:
            return current  # installed once: a second install of the feature changes nothing
        raise PatchError(
            f"{current.where} is patched by {current.feature} already; {feature} must not stack "
            "a second wrapper on it (a shared name gets a hook here, as init_process_group has)"
        )
    return _apply(owner, name, replacement, feature, forwards)


def wrap(owner: Any, name: str, make: Callable[[Any], Any], *, feature: str) -> Patch:
    """Replace ``owner.name`` by ``make(original)``, a forwarding wrapper of the original's name."""
    current = None if _recorder is not None else _active(owner, name)
    if current is not None and current.feature == feature:
        return current  # not wrapped twice
    original = getattr(owner, name)
    return replace(
        owner, name, functools.wraps(original)(make(original)), feature=feature, forwards=True
    )


def remove(patch: Patch) -> None:
    """Put back what `patch` replaced; a name patched again on top must be removed first."""
    if patch not in APPLIED:
        return
    if _active(patch.owner, patch.name) is not patch:
        raise PatchError(f"{patch.where} was patched again on top of {patch.feature}'s patch")
    if getattr(patch.owner, patch.name, _MISSING) is not patch.replacement:
        raise PatchError(f"{patch.where} was changed outside the registry since {patch.feature}")
    if patch.existed and patch.own:
        setattr(patch.owner, patch.name, patch.original)
    else:
        delattr(patch.owner, patch.name)  # it was inherited (or absent): nothing of ours stays
    APPLIED.remove(patch)


def restore(feature: str) -> list[Patch]:
    """Remove every patch of `feature` (newest first) and its hooks; the patches removed."""
    for table in (_group_hooks, _uncaught):
        if feature == "hooks":
            table.clear()  # the shared wrappers go: nothing is left to call the hooks
        table.pop(feature, None)
    gone = [p for p in reversed(APPLIED) if p.feature == feature]
    for patch in gone:
        remove(patch)
    return gone + _remove_idle_hubs()


def applied(feature: str | None = None) -> list[Patch]:
    """The patches in place, oldest first: all, or `feature`'s."""
    return [p for p in APPLIED if feature is None or p.feature == feature]


@contextlib.contextmanager
def temporarily(owner: Any, name: str, replacement: Any, *, feature: str) -> Iterator[None]:
    """Within the block ``owner.name`` is `replacement` (even over another feature's patch)."""
    if _recorder is not None:
        _apply(owner, name, replacement, feature, False)
        yield
        return
    patch = _apply(owner, name, replacement, feature, False)
    try:
        yield
    finally:
        remove(patch)


Args = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class GroupHook:
    """What one feature does around ``init_process_group``."""

    feature: str
    #: sees (and may rewrite) the call's arguments before torch does
    before: Callable[[tuple[Any, ...], dict[str, Any]], Args] | None = None
    #: after the group formed
    after: Callable[[], None] | None = None
    #: the call raised (it is re-raised after every hook has seen it)
    failed: Callable[[BaseException], None] | None = None


#: whichever feature registered first, the ``before`` hooks run in this order and ``after`` and
#: ``failed`` in the reverse: the fast start notes the call before anything can fail (a script
#: inside ``init_process_group`` must not be rerun in a fresh interpreter), self-start's notes
#: see the outcome of the call as the script made it, and the rehearsal rewrites the arguments
#: last (nccl → gloo, no ``device_id``), right before torch's own function
GROUP_ORDER = ("fast_start", "self_start", "rehearse")

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
#: a feature's part of the excepthook: the exception, and the hook below it to hand it on to
Handler = Callable[[type[BaseException], BaseException, TracebackType | None, ExceptHook], None]

#: the order the uncaught-exception handlers run in, each handing on to the next (or not): the
#: watchdog's (the job is going down: exit with its code), distrain's failure report (one line
#: or the root cause once, the agent's error file), self-start's error file; the last hands on
#: to the hook that was there when the registry installed its own (the interpreter's, torch's
#: ``[rankN]`` one or the script's)
UNCAUGHT_ORDER = ("watchdog", "failure", "self_start")

_group_hooks: dict[str, GroupHook] = {}
_uncaught: dict[str, Handler] = {}


def on_init_process_group(hook: GroupHook) -> None:
    """Add `hook` to the one wrapper of ``init_process_group`` (installed with the first hook).

    Once per feature: a feature's second hook is ignored.  Under :func:`recording` only the
    wrapper's patches are recorded.
    """
    if hook.feature not in GROUP_ORDER:
        raise PatchError(f"no place for {hook.feature!r} in GROUP_ORDER")
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if _recorder is None:
        _group_hooks.setdefault(hook.feature, hook)
    current = None if _recorder is not None else _active(distributed_c10d, "init_process_group")
    if current is not None and current.feature == "hooks":
        return
    original = distributed_c10d.init_process_group
    wrapper = functools.wraps(original)(_group_wrapper(original))
    owners = {id(m): m for m in (distributed_c10d, dist, *holders(original))}
    for module in owners.values():
        replace(module, "init_process_group", wrapper, feature="hooks", forwards=True)


def holders(function: Any) -> list[Any]:
    """The modules imported so far that hold `function` under its own name at module level.

    torch reaches ``init_process_group`` through more than ``torch.distributed``'s attribute:
    ``torch.distributed.device_mesh`` imported its own reference (``from ...distributed_c10d
    import init_process_group``) with ``torch.distributed``, before any wrapper existed, and
    ``init_device_mesh`` starts the default group through it.  A module imported after the
    wrapper copies the wrapper, so the ones already imported are all there is to replace.
    """
    name = function.__name__
    return [
        module
        for module in list(sys.modules.values())
        if module is not None and getattr(module, "__dict__", {}).get(name) is function
    ]


def _group_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        hooks = [_group_hooks[f] for f in GROUP_ORDER if f in _group_hooks]
        for hook in hooks:
            if hook.before is not None:
                args, kwargs = hook.before(args, kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            for hook in reversed(hooks):
                if hook.failed is not None:
                    hook.failed(exc)
            raise
        for hook in reversed(hooks):
            if hook.after is not None:
                hook.after()
        return result

    return init_process_group


def hooked() -> dict[str, list[str]]:
    """The features whose hooks each shared wrapper calls, in the order it calls them."""
    return {
        "init_process_group": [f for f in GROUP_ORDER if f in _group_hooks],
        "excepthook": [f for f in UNCAUGHT_ORDER if f in _uncaught],
    }


def on_uncaught(feature: str, handler: Handler) -> None:
    """Add `feature`'s handler to the one ``sys.excepthook`` (set with the first; once each)."""
    if feature not in UNCAUGHT_ORDER:
        raise PatchError(f"no place for {feature!r} in UNCAUGHT_ORDER")
    if _recorder is None:
        _uncaught.setdefault(feature, handler)
    replace(sys, "excepthook", _excepthook, feature="hooks")


def _excepthook(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
    """sys.excepthook: the handlers in UNCAUGHT_ORDER, then the hook that was there before."""
    below = _active(sys, "excepthook")
    chain: ExceptHook = below.original if below is not None else sys.__excepthook__
    for feature in reversed([f for f in UNCAUGHT_ORDER if f in _uncaught]):
        chain = _link(_uncaught[feature], chain)
    chain(kind, err, tb)


def _link(handler: Handler, below: ExceptHook) -> ExceptHook:
    def hook(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
        handler(kind, err, tb, below)

    return hook


def _remove_idle_hubs() -> list[Patch]:
    """Put back the shared wrappers no feature hooks any more."""
    idle = {"init_process_group"} if not _group_hooks else set()
    idle |= {"excepthook"} if not _uncaught else set()
    gone = [p for p in reversed(APPLIED) if p.feature == "hooks" and p.name in idle]
    for patch in gone:
        remove(patch)
    return gone


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
    """`impl` under `original`'s signature: arguments bind (or raise TypeError) as there."""
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return impl

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        return impl(*bound.args, **bound.kwargs)

    # what inspect reports: every call binds it
    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__name__, call.__qualname__ = original.__name__, original.__qualname__
    call.__doc__ = impl.__doc__ or f"distrain run --cpu stand-in for {original.__qualname__}"
    if hasattr(original, "__wrapped__"):
        # a decorated original (``@contextmanager`` torch.cuda.use_mem_pool) has one, and Dynamo
        # reads it while tracing any torch call; unwrapped, the stand-in leads to itself
        call.__wrapped__ = impl  # type: ignore[attr-defined]
    return call
