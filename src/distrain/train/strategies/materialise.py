"""Models built on the meta device (``with ctx.init_model():``): storage and initial values later.

A meta model holds shapes only, so a model larger than one device can be built on every rank for
free.  :func:`materialise_own` gives one module its real tensors: allocated on the CPU, filled
by the module's own ``reset_parameters()`` — the call torch's layers make at the end of their
``__init__`` — and so equal to a one-process construction that drew from the same generator
state, visited in the same order (children first, in registration order: see
:func:`post_order`).  The CPU generator is used even for GPU training, because that is what a
model built on the CPU and then moved draws from.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from ...errors import DistrainError


def is_on_meta(model: nn.Module) -> bool:
    """True when any parameter or buffer of `model` is on the meta device."""
    return any(t.is_meta for t in model.parameters()) or any(t.is_meta for t in model.buffers())


def post_order(module: nn.Module) -> Iterator[nn.Module]:
    """`module`'s submodules children-first, in registration order, `module` last (each once)."""
    seen: set[int] = set()

    def visit(m: nn.Module) -> Iterator[nn.Module]:
        if id(m) in seen:
            return
        seen.add(id(m))
        for child in m.children():
            yield from visit(child)
        yield m

    yield from visit(module)


def materialise_own(module: nn.Module, memo: dict[int, torch.Tensor]) -> None:
    """Give `module`'s own meta parameters and buffers CPU storage and run its reset_parameters().

    reset_parameters() runs whenever the module has one (also a container whose own
    reset_parameters() re-initialises its children, as its ``__init__`` would have done).
    `memo` maps a meta tensor to its replacement, so a parameter shared by two modules stays
    shared (it ends with the values of the last module that resets it).
    """
    own = [(name, t, True) for name, t in module._parameters.items() if t is not None and t.is_meta]
    own += [(name, t, False) for name, t in module._buffers.items() if t is not None and t.is_meta]
    fresh = False
    for name, tensor, is_param in own:
        new = memo.get(id(tensor))
        if new is None:
            fresh = True
            new = torch.empty_like(tensor, device="cpu")
            if is_param:
                new = nn.Parameter(new, requires_grad=tensor.requires_grad)
            memo[id(tensor)] = new
        if is_param:
            module._parameters[name] = new  # type: ignore[assignment]
        else:
            module._buffers[name] = new
    reset = getattr(module, "reset_parameters", None)
    if not callable(reset):
        if fresh:
            raise DistrainError(
                f"{type(module).__name__} built under init_model() has tensors but no reset_parameters(): "
                "give it one that initialises its own parameters and buffers"
            )
        return
    with torch.no_grad():
        reset()
