"""runtime/patching.py: every torch name the CPU rehearsal replaces keeps torch's kind and signature.

The installers run under ``patching.recording()``, so the test process's torch is never changed;
each recorded patch is compared with the torch object it replaces: a class stays a class (Dynamo
and scripts call ``isinstance`` on them), a function stays callable with the same parameters
(names, kinds, defaults: ``torch.cuda.stream(stream=s)`` must bind), where ``inspect`` can read
torch's signature.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import pytest
import torch.utils.cpp_extension

from distrain.runtime import patching
from distrain.runtime.rehearse import devices, fake_cuda, patches, refuse


@pytest.fixture(scope="module")
def recorded() -> list[patching.Patch]:
    saved = (fake_cuda._State.count, Counter(devices.MAPPED), len(patching.APPLIED))
    with patching.recording() as found:
        devices.install()
        fake_cuda.install(2)
        patches.install()
        refuse._cpp_extension(torch.utils.cpp_extension)
    fake_cuda._State.count = saved[0]
    assert len(patching.APPLIED) == saved[2] and devices.MAPPED == saved[1]
    return found


def kind(obj: Any) -> str:
    return "class" if isinstance(obj, type) else "callable" if callable(obj) else "value"


def signature(obj: Any, follow_wrapped: bool = False) -> inspect.Signature | None:
    try:
        return inspect.signature(obj, follow_wrapped=follow_wrapped)
    except (TypeError, ValueError):
        return None  # a C function or class without text signature: only its kind is compared


def params(sig: inspect.Signature) -> list[tuple[str, Any, str]]:
    return [(p.name, p.kind, repr(p.default)) for p in sig.parameters.values()]


def generic(sig: inspect.Signature) -> bool:
    """(*args, **kwargs), after an optional self: a wrapper that lets the original bind."""
    rest = [p.kind for p in sig.parameters.values() if p.name not in ("self",)]
    return rest == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def test_every_patch_is_recorded_and_nothing_applied(recorded: list[patching.Patch]) -> None:
    where = {p.where for p in recorded}
    for name in (
        "torch.cuda.stream",
        "torch.cuda.MemPool",
        "torch.cuda.CUDAGraph",
        "torch.zeros",
        "torch.Tensor.to",
        "torch.amp.autocast_mode.autocast.__init__",
    ):
        assert name in where, sorted(where)
    assert len(recorded) > 150


def test_replacements_keep_torchs_kind_and_signature(recorded: list[patching.Patch]) -> None:
    wrong = []
    for patch in recorded:
        original, new = patch.original, patch.replacement
        if original is None:
            wrong.append(f"{patch.where}: torch has no such name")
            continue
        if kind(new) != kind(original):
            wrong.append(f"{patch.where}: {kind(original)} replaced by a {kind(new)}")
            continue
        want, got = (
            signature(original, follow_wrapped=True),
            signature(new),
        )  # torch's advertised one
        if want is None or (patch.forwards and got is not None and generic(got)):
            continue  # torch's own signature unreadable, or the original binds the arguments
        if got is None or params(got) != params(want):
            wrong.append(f"{patch.where}: {want} became {got}")
    assert not wrong, "\n".join(wrong)


def test_every_patch_is_listed_in_torch_internals(recorded: list[patching.Patch]) -> None:
    from helpers import REPO

    doc = (REPO / "docs" / "torch_internals.md").read_text()
    section = doc.split("## Patched under `distrain run --cpu`", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1]: line for line in section.splitlines() if line.startswith("- `")}
    factories = set(devices.factory_names())
    missing = [
        p.where
        for p in recorded
        if not (p.owner is torch and p.name in factories)
        and f"`{p.name}`" not in listed.get(p.where.rsplit(".", 1)[0], "")
    ]
    assert not missing, f"add to docs/torch_internals.md: {missing}"
