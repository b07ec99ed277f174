"""process/patching.py: the registry of patched names, and what the installers put in it.

The installers run under ``patching.recording()``, so the test process's torch is never changed;
each recorded rehearsal patch is compared with the torch object it replaces: a class stays a
class (Dynamo and scripts call ``isinstance`` on them), a function stays callable with the same
parameters (names, kinds, defaults: ``torch.cuda.stream(stream=s)`` must bind), where
``inspect`` can read torch's signature.  docs/torch_internals.md must list exactly the names
every feature's installers patch.  The registry's own rules (installed once, removable, one
wrapper of ``init_process_group`` and of ``sys.excepthook`` calling hooks in a fixed order) are
checked on a registry emptied for the test.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch.cuda.comm
import torch.nn.attention
import torch.utils.cpp_extension
from torch.nn.attention import flex_attention

from distrain.process import patching
from distrain.settings import Settings
from distrain.worker.rehearse import devices, fake_cuda, patches, refuse


@pytest.fixture(scope="module")
def recorded() -> list[patching.Patch]:
    saved = (fake_cuda._State.count, Counter(devices.MAPPED), len(patching.APPLIED))
    with patching.recording() as found:
        devices.install()
        fake_cuda.install(2)
        patches.install()
        refuse._cpp_extension(torch.utils.cpp_extension)
        refuse._flex_attention(flex_attention)
        refuse._attention_kernels(torch.nn.attention)
        refuse._cuda_comm(torch.cuda.comm)
    fake_cuda._State.count = saved[0]
    assert len(patching.APPLIED) == saved[2] and devices.MAPPED == saved[1]
    return [p for p in found if p.feature == "rehearse"]


@pytest.fixture(scope="module")
def every_feature() -> list[patching.Patch]:
    """What every installer outside the rehearsal patches, recorded (nothing applied)."""
    from distrain.launch.fast_start import server_fork, worker_groups
    from distrain.launch.nodes import store_port
    from distrain.parallel import comm_hooks
    from distrain.worker import atomic_save, self_start as selfstart
    from distrain.worker.fast_start import as_exec, forked
    from distrain.worker.lifecycle import failure, watchdog
    from distrain.worker.replicas import (
        bind as ft_bind,
        noise as ft_noise,
        optimizers as ft_optimizers,
        refusal as ft_refusal,
        sync as replica_sync,
    )
    from distrain.worker.self_start import members

    saved = (len(patching.APPLIED), patching.hooked())
    with patching.recording() as found:
        forked._watch_process_group()
        as_exec.report_on_exit(queue=None)
        members.hook_process_run()
        members.hook_torch()
        selfstart._watch_children()
        selfstart._record_uncaught()
        failure.install(0, Settings())
        watchdog.exit_on_uncaught()
        ft_noise.quiet_sequence_numbers()
        ft_optimizers._wrap_init()
        ft_refusal.check_samplers(joined=lambda: True)
        with replica_sync.real_accelerator(True), ft_bind.manager_server_on("127.0.0.1"):
            pass
        comm_hooks._use_fast_low_rank_products()
        patches._process_groups()  # the rehearsal's hook of init_process_group
        atomic_save.install()
        worker_groups.stop_whole_groups()  # in the launcher, one of its two names
        with server_fork.forked_server():  # and the other, while the fork server starts
            pass
        store_port.install()  # the agent's, whatever the start method
    assert (len(patching.APPLIED), patching.hooked()) == saved
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

    section = _doc_section("## Patched under `distrain run --cpu`")
    listed = {line.split("`")[1]: line for line in section.splitlines() if line.startswith("- `")}
    factories = set(devices.factory_names())
    missing = [
        p.where
        for p in recorded
        if not (p.owner is torch and p.name in factories)
        and f"`{p.name}`" not in listed.get(p.where.rsplit(".", 1)[0], "")
    ]
    assert not missing, f"add to docs/torch_internals.md: {missing}"
    names = {
        f"{owner}.{name}"
        for owner, line in listed.items()
        for name in line.split(":", 1)[1].split("`")[1::2]
    }
    stale = names - {p.where for p in recorded}
    assert not stale, f"docs/torch_internals.md lists what the rehearsal no longer patches: {stale}"


def _doc_section(title: str) -> str:
    from helpers import REPO

    doc = (REPO / "docs" / "torch_internals.md").read_text()
    return doc.split(title + "\n", 1)[1].split("\n## ", 1)[0]


def test_the_patched_names_table_lists_exactly_what_the_features_patch(
    every_feature: list[patching.Patch],
) -> None:
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in _doc_section("## Patched names").splitlines()
        if line.startswith("| ") and not line.startswith("| name ")
    ]
    table = {
        (name, row[1]) for row in rows if row[1] != "rehearse" for name in row[0].split("`")[1::2]
    }
    assert {row[1] for row in rows} <= set(patching.FEATURES)
    assert "rehearse" in {row[1] for row in rows}  # its names: the section the test above checks
    patched = {(p.where, p.feature) for p in every_feature if p.feature != "rehearse"}
    assert patched - table == set(), "add to docs/torch_internals.md's Patched names"
    assert table - patched == set(), "no installer patches these any more"
    # the shared wrappers' rows say which features' hooks they call, in the order they call them
    why = {row[0].split("`")[1]: row[2] for row in rows}
    for name, order in (
        ("torch.distributed.init_process_group", patching.GROUP_ORDER),
        ("sys.excepthook", patching.UNCAUGHT_ORDER),
    ):
        said = [f for f in sorted(order, key=lambda f: why[name].find(f)) if f in why[name]]
        assert said == list(order), (name, said)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """An empty registry over torch's own init_process_group and a recording excepthook.

    Whatever the test installs is put back by the test itself (restore), checked here; the
    registry's tables of another test are out of reach meanwhile.
    """
    import torch.distributed as dist
    from torch.distributed import device_mesh, distributed_c10d

    calls: list[str] = []
    below = lambda *exc: calls.append("below")  # noqa: E731 - the hook that was there before
    monkeypatch.setattr(patching, "APPLIED", [])
    monkeypatch.setattr(patching, "_group_hooks", {})
    monkeypatch.setattr(patching, "_uncaught", {})
    monkeypatch.setattr(sys, "excepthook", below)
    init = distributed_c10d.init_process_group
    monkeypatch.setattr(dist, "init_process_group", init)
    monkeypatch.setattr(device_mesh, "init_process_group", init)
    yield calls
    assert patching.APPLIED == [] and patching.hooked() == {
        "init_process_group": [],
        "excepthook": [],
    }
    assert dist.init_process_group is distributed_c10d.init_process_group is init
    assert device_mesh.init_process_group is init
    assert sys.excepthook is below


def test_a_name_is_installed_once_and_not_stacked_by_another_feature(registry: list[str]) -> None:
    owner = types.ModuleType("owner")
    owner.f = original = lambda: "torch's"  # type: ignore[attr-defined]
    first = patching.wrap(owner, "f", lambda f: lambda: f() + ", wrapped", feature="rehearse")
    again = patching.wrap(owner, "f", lambda f: lambda: f() + ", twice", feature="rehearse")
    assert again is first and owner.f() == "torch's, wrapped"  # type: ignore[attr-defined]
    with pytest.raises(patching.PatchError, match="owner.f is patched by rehearse already"):
        patching.replace(owner, "f", print, feature="self_start")
    assert patching.applied("rehearse") == [first] and patching.applied("self_start") == []
    assert patching.restore("rehearse") == [first]
    assert owner.f is original  # type: ignore[attr-defined]


def test_remove_puts_back_an_inherited_or_absent_name_by_deleting_it(registry: list[str]) -> None:
    class Base:
        def run(self) -> str:
            return "base"

    class Child(Base):
        pass

    inherited = patching.replace(Child, "run", lambda self: "patched", feature="self_start")
    absent = patching.replace(Child, "extra", 1, feature="self_start")
    assert Child().run() == "patched" and Child.extra == 1  # type: ignore[attr-defined]
    patching.remove(absent)
    patching.remove(inherited)
    assert "run" not in vars(Child) and "extra" not in vars(Child) and Child().run() == "base"


def test_temporarily_stacks_on_another_features_patch_and_unstacks(registry: list[str]) -> None:
    owner = types.ModuleType("owner")
    owner.is_available = lambda: False  # type: ignore[attr-defined]
    stand_in = patching.replace(owner, "is_available", lambda: True, feature="rehearse")
    with patching.temporarily(owner, "is_available", lambda: False, feature="replicas"):
        assert owner.is_available() is False  # type: ignore[attr-defined]
        assert [p.feature for p in patching.applied()] == ["rehearse", "replicas"]
        with pytest.raises(patching.PatchError, match="patched again on top"):
            patching.remove(stand_in)
    assert owner.is_available is stand_in.replacement  # type: ignore[attr-defined]
    patching.restore("rehearse")


def test_init_process_group_is_wrapped_once_and_hooks_run_in_a_fixed_order(
    registry: list[str],
) -> None:
    import torch.distributed as dist
    from torch.distributed import device_mesh, distributed_c10d

    calls = registry

    def hook(feature: str) -> patching.GroupHook:
        def before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> patching.Args:
            calls.append(f"{feature} before {kwargs['backend']}")
            if feature == "rehearse":  # as the rehearsal does: nccl → gloo, right before torch
                kwargs["backend"] = "gloo"
            return args, kwargs

        return patching.GroupHook(
            feature,
            before=before,
            after=lambda: calls.append(f"{feature} after"),
            failed=lambda exc: calls.append(f"{feature} failed {type(exc).__name__}"),
        )

    # registered in the reverse of GROUP_ORDER (as a fresh interpreter's sitecustomize may)
    for feature in reversed(patching.GROUP_ORDER):
        patching.on_init_process_group(hook(feature))
        patching.on_init_process_group(hook(feature))  # once per feature
    assert dist.init_process_group is distributed_c10d.init_process_group
    assert [p.where for p in patching.applied()] == [
        "torch.distributed.distributed_c10d.init_process_group",
        "torch.distributed.init_process_group",
        # its own `from ...distributed_c10d import init_process_group`: init_device_mesh's start
        "torch.distributed.device_mesh.init_process_group",
    ]
    assert device_mesh.init_process_group is dist.init_process_group
    store, hook_before = dist.HashStore(), sys.excepthook
    dist.init_process_group(backend="nccl", store=store, rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
        with pytest.raises(ValueError, match="twice"):
            dist.init_process_group(backend="gloo", store=store, rank=0, world_size=1)
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook_before  # torch's init_process_group put its [rank0] one over it
    assert calls == [
        "fast_start before nccl",
        "self_start before nccl",
        "rehearse before nccl",
        "rehearse after",
        "self_start after",
        "fast_start after",
        "fast_start before gloo",
        "self_start before gloo",
        "rehearse before gloo",
        "rehearse failed ValueError",
        "self_start failed ValueError",
        "fast_start failed ValueError",
    ]
    patching.restore("rehearse")
    assert patching.hooked()["init_process_group"] == ["fast_start", "self_start"]
    patching.restore("fast_start")
    assert patching.applied("hooks")  # self-start's hook still needs the wrapper
    patching.restore("self_start")  # the last hook: the wrapper goes too


def test_the_one_excepthook_calls_the_handlers_in_a_fixed_order(registry: list[str]) -> None:
    calls = registry

    def handler(feature: str) -> patching.Handler:
        def handle(kind: Any, err: Any, tb: Any, below: patching.ExceptHook) -> None:
            calls.append(feature)
            below(kind, err, tb)

        return handle

    for feature in ("self_start", "watchdog", "failure"):  # not UNCAUGHT_ORDER's order
        patching.on_uncaught(feature, handler(feature))
    assert [p.where for p in patching.applied()] == ["sys.excepthook"]
    err = RuntimeError("uncaught")
    sys.excepthook(RuntimeError, err, None)
    assert calls == [*patching.UNCAUGHT_ORDER, "below"]
    for feature in patching.UNCAUGHT_ORDER:
        patching.restore(feature)
