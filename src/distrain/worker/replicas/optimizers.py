"""Under `distrain run --replicas`: every optimizer's own ``step`` goes through the replica commit.

A script converted as the README shows keeps ``loss.backward()`` and ``opt.step()``; only
``ctx.step(opt)`` used to pass through TorchFT's commit vote, so such a script's groups never
committed a step, a replacement healed "at step 0" and the job failed at its end.  :func:`install`
runs in every worker of a replica group before the script (the fast start's forked worker, the
boot sitecustomize of a fresh interpreter) and wraps ``torch.optim.Optimizer.__init__`` (through
the patching registry): each optimizer made in the process gets, as its own ``step``, a bound
method that asks the group's :class:`~distrain.worker.replicas.training.Replicas` whether the
quorum commits, and runs torch's step (its hooks included: the step counter, the scheduler's
bookkeeping, GradScaler) only when it does.  A pre-hook cannot do this: it cannot cancel the
update.  An optimizer's own attribute, not the class's: an optimizer class that was already
used in the process (the fork server's preload) is covered all the same.

A process that steps an optimizer while nothing joins it to the replica API (no
``distrain.init()``, or an optimizer over no model given to ``ctx.prepare_model``) would train
alone, silently unreplicated: it is refused at its first step instead, in one line that the
launcher prints (a ``refused`` replica event), with :data:`~distrain.contract.REFUSED_EXIT_CODE`
(refusal.py).
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

from distrain.errors import DistrainError
from distrain.process import patching
from distrain.settings import for_report
from distrain.worker.replicas.refusal import check_samplers, refuse
from distrain.worker.steps import steps_paused

if TYPE_CHECKING:
    from torch.optim import Optimizer

FEATURE = "replicas"


class Member(Protocol):
    """What the gate asks of this process's replica group (training.py's Replicas)."""

    applying: bool

    def covers(self, optimizer: Optimizer) -> bool:
        """Whether `optimizer` updates a model prepared for the groups."""
        ...

    def step(self, apply: Callable[[], None]) -> bool:
        """Run `apply` only if the quorum commits this step; whether it did."""
        ...


#: this process's replica group, once distrain.init() attached it (None: not joined)
_member: Member | None = None
#: every optimizer made in this process since install(), in the order made (the names a heal
#: copies them under must be the same in every group)
_made: list[weakref.ref[Optimizer]] = []


def join(member: Member | None) -> None:
    """Route optimizer steps to `member` (distrain.init() under --replicas); None: leave."""
    global _member
    _member = member


def made() -> list[Optimizer]:
    """The optimizers made in this process that are still alive, oldest first."""
    return [opt for ref in _made if (opt := ref()) is not None]


def install() -> None:
    """Give every optimizer made from now on the replica-committing ``step``, and refuse a
    DistributedSampler that splits the data over fewer processes than the groups hold (under
    --replicas; refusal.py)."""
    if for_report().replica_group is not None:
        _wrap_init()
        check_samplers(joined=lambda: _member is not None)


def _wrap_init() -> None:
    def make(original: Any) -> Any:
        def __init__(self: Optimizer, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if any(ref() is self for ref in _made):  # a subclass's __init__ calling its base's
                return
            _made.append(weakref.ref(self))
            # an attribute of the user's object, set by the registry's patch of __init__ (as
            # torch's LR scheduler sets its own wrapper there, over this one: a per-instance
            # registry entry could not be removed after that); bound, as the scheduler expects
            self.step = types.MethodType(_step, self)  # type: ignore[method-assign]

        return __init__

    patching.wrap(torch.optim.Optimizer, "__init__", make, feature=FEATURE)


def _step(self: Optimizer, *args: Any, **kwargs: Any) -> Any:
    """``optimizer.step()`` under --replicas: torch's step only if the quorum commits it."""

    def run() -> Any:
        return type(self).step(self, *args, **kwargs)  # the class's: torch's hooks run in it

    member = _member
    # a step inside ctx.step's commit, or a restore's zero-lr step that creates the optimizer's
    # state (torch's _init_optim_state, under the step counter's pause): not a step of its own
    if steps_paused() or (member is not None and member.applying):
        return run()
    if member is None:
        refuse("this process stepped an optimizer without calling distrain.init()")
    if not member.covers(self):
        refuse(
            f"this process stepped a {type(self).__name__} over no model given to ctx.prepare_model"
        )
    if args and args[0] is not None or kwargs.get("closure") is not None:
        raise DistrainError(
            "--replicas: optimizer.step(closure) is not supported (each step is one forward, "
            "one backward and one commit vote; TorchFT's optimizer wrapper refuses it too)"
        )
    out: list[Any] = []
    member.step(lambda: out.append(run()))
    return out[0] if out else None
