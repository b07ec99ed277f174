"""Models built on the meta device (``with ctx.init_model():``): storage and initial values later.

A meta model holds shapes only, so a model larger than one device can be built on every rank for
free.  :func:`materialise_own` gives one module its real tensors: allocated on the CPU, filled
by the module's own ``reset_parameters()`` — the call torch's layers make at the end of their
``__init__`` — and so equal to a one-process construction that drew from the same generator
state, visited in the same order (children first, in registration order: see
:func:`init_order`).  The CPU generator is used even for GPU training, because that is what a
model built on the CPU and then moved draws from.

torch's own modules are covered too: ``nn.MultiheadAttention`` and ``nn.Transformer``
initialise in a private ``_reset_parameters()``, accepted for classes that torch defines; and
``nn.TransformerEncoder``/``nn.TransformerDecoder`` deep-copy one layer N times, so their
layers start identical: every copy is initialised from the generator state the first one began
with (see :func:`init_order`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from distrain.errors import DistrainError


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


#: torch containers whose ``layers`` are deep copies of one layer
#: (``torch.nn.modules.transformer._get_clones``)
CLONING_CONTAINERS: tuple[type[nn.Module], ...] = (nn.TransformerEncoder, nn.TransformerDecoder)


def init_order(module: nn.Module) -> Iterator[nn.Module]:
    """:func:`post_order`, rewinding the CPU generator for the copies of a cloned layer.

    An eager ``nn.TransformerEncoder(layer, N)`` draws random numbers once (building `layer`) and
    deep-copies it, so its N layers start equal and the generator moves on by one layer's
    draws.  Materialising layer k ≥ 1 from the state layer 0 started with repeats those draws:
    the layers end equal, and the generator ends where the eager build left it.  Consume this
    iterator in step with materialising (the rewind happens between yields).
    """
    rewind: dict[int, int] = {}  # id(copy) -> id(first layer)
    for m in module.modules():
        layers = getattr(m, "layers", None) if isinstance(m, CLONING_CONTAINERS) else None
        if isinstance(layers, nn.ModuleList) and len(layers) > 1:
            rewind.update({id(copy): id(layers[0]) for copy in list(layers)[1:]})
    sources = set(rewind.values())
    states: dict[int, torch.Tensor] = {}
    seen: set[int] = set()

    def visit(m: nn.Module) -> Iterator[nn.Module]:
        if id(m) in seen:
            return
        seen.add(id(m))
        if id(m) in sources:
            states[id(m)] = torch.get_rng_state()
        elif id(m) in rewind:
            torch.set_rng_state(states[rewind[id(m)]])
        for child in m.children():
            yield from visit(child)
        yield m

    yield from visit(module)


def _initialiser(module: nn.Module) -> Any:
    """The module's ``reset_parameters``, or the private ``_reset_parameters`` of a torch class."""
    reset = getattr(module, "reset_parameters", None)
    if callable(reset):
        return reset
    private = getattr(module, "_reset_parameters", None)
    if callable(private) and type(module).__module__.startswith("torch."):
        return private
    return None


def materialise_own(module: nn.Module, memo: dict[int, torch.Tensor]) -> None:
    """Give `module`'s own meta parameters and buffers CPU storage and run its reset_parameters().

    reset_parameters() (for torch's own classes also ``_reset_parameters()``) runs whenever
    the module has one (also a container whose own
    reset_parameters() re-initialises its children, as its ``__init__`` would have done).
    `memo` maps a meta tensor to its replacement, so a parameter shared by two modules stays
    shared (it ends with the values of the last module that resets it).
    """
    own: list[tuple[str, torch.Tensor, bool]] = [
        (name, t, True) for name, t in module._parameters.items() if t is not None and t.is_meta
    ]
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
    reset = _initialiser(module)
    if reset is None:
        if fresh:
            raise DistrainError(
                f"{type(module).__name__} built under init_model() has tensors but no "
                "reset_parameters(): "
                "give it one that initialises its own parameters and buffers"
            )
        return
    with torch.no_grad():
        reset()
