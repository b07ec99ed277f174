"""parallel/options.py: DDP/FSDP/HSDP objects, their checks, the name aliases, and the
older keyword calls building the same objects (no process group: one-process prepare only)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import pytest
import torch
from torch import nn

import distrain
from distrain.errors import DistrainError
from distrain.parallel import DDP, FSDP, HSDP, STRATEGIES, Strategy, prepare, resolve
from distrain.parallel.options import LOOSE_DEFAULTS
from distrain.worker.context import Context


def _prepare_model_keywords() -> dict[str, Any]:
    params = inspect.signature(Context.prepare_model).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_loose_defaults_are_prepare_models() -> None:
    """The keywords resolve() takes as 'not asked for' are exactly prepare_model's defaults."""
    assert _prepare_model_keywords() == LOOSE_DEFAULTS


def _refused(message: str) -> Any:
    return pytest.raises(DistrainError, match=re.escape(message))


def test_public_from_distrain() -> None:
    assert (distrain.DDP, distrain.FSDP, distrain.HSDP, distrain.Strategy) == (
        DDP,
        FSDP,
        HSDP,
        Strategy,
    )
    assert {"DDP", "FSDP", "HSDP", "Strategy"} <= set(distrain.__all__)


def test_aliases_map_names_to_classes() -> None:
    assert STRATEGIES == {"ddp": DDP, "fsdp": FSDP, "hsdp": HSDP}
    assert all(cls.name == name for name, cls in STRATEGIES.items())
    assert issubclass(HSDP, FSDP)  # an HSDP model is a sharded one wherever FSDP is asked about


def test_construction_holds_options_and_is_frozen() -> None:
    spec = FSDP(reshard_after_forward=False, activation_checkpointing=True, shard=[nn.Linear])
    assert (spec.reshard_after_forward, spec.activation_checkpointing, spec.cpu_offload) == (
        False,
        True,
        False,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.cpu_offload = True  # type: ignore[misc]
    extra = {"gradient_as_bucket_view": True}
    ddp = DDP(sync_bn=True, comm_hook="powersgd:rank=2", extra=extra)
    extra["static_graph"] = True  # the caller's dict is copied, not shared
    assert ddp.extra == {"gradient_as_bucket_view": True}
    assert HSDP(replicate=2).replicate == 2 and HSDP().replicate is None
    with pytest.raises(TypeError):
        FSDP(None)  # type: ignore[misc]  # keyword-only: no positional guessing among flags


def test_callee_options_only_what_was_set() -> None:
    assert DDP().callee_options() == {}
    assert DDP(bucket_cap_mb=10, static_graph=True,
               extra={"gradient_as_bucket_view": True}).callee_options() == {
        "bucket_cap_mb": 10, "static_graph": True, "gradient_as_bucket_view": True}  # fmt: skip
    assert FSDP().callee_options() == {}
    assert HSDP(reshard_after_forward=2, replicate=2).callee_options() == {
        "reshard_after_forward": 2
    }


@pytest.mark.parametrize(("build", "message"), [
    (lambda: DDP(cpu_offload=True),
     "cpu_offload=True needs strategy='fsdp' or 'hsdp' on a GPU, not strategy='ddp'"),
    (lambda: FSDP(sync_bn=True), "sync_bn=True cannot be used with strategy='fsdp'"),
    (lambda: HSDP(comm_hook="bf16"), "comm_hook is a DDP feature; strategy='hsdp' has none"),
    (lambda: FSDP(replicate=2), "replicate= needs strategy='hsdp', got strategy='fsdp'"),
    (lambda: FSDP(reshard_afterforward=False),
     "reshard_afterforward= is no option of strategy 'fsdp' (FSDP)"),
    (lambda: DDP(comm_hook="int8"), "DDP: comm_hook must be one of bf16, fp16, powersgd"),
    (lambda: DDP(sync_bn="yes"), "DDP: sync_bn='yes' must be True or False"),
    (lambda: DDP(bucket_cap_mb=0), "DDP: bucket_cap_mb=0 must be a number of MiB > 0"),
    (lambda: DDP(shard=[int]), "DDP: shard= takes nn.Module classes"),
    (lambda: FSDP(shard=3), "FSDP: shard= takes None, nn.Module classes"),
    (lambda: FSDP(cpu_offload=1), "FSDP: cpu_offload=1 must be True or False"),
    (lambda: FSDP(reshard_after_forward="no"),
     "FSDP: reshard_after_forward='no' must be True, False"),
    (lambda: HSDP(replicate=0), "HSDP: replicate=0 must be a whole number of replica groups >= 1"),
    (lambda: HSDP(replicate=True), "HSDP: replicate=True must be a whole number"),
    (lambda: FSDP(extra={"mp_polcy": None}),
     "FSDP: extra={'mp_polcy': None} names 'mp_polcy', which fully_shard does not take"),
    (lambda: DDP(extra={"reshard_after_forward": False}),
     "which DistributedDataParallel does not take"),
    (lambda: FSDP(extra={"cpu_offload": True}),
     "names 'cpu_offload', an option of its own: FSDP(cpu_offload=...)"),
])  # fmt: skip
def test_bad_option_is_one_line_naming_option_and_strategy(build: Any, message: str) -> None:
    with _refused(message) as caught:
        build()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("name", "options", "expected"), [
    ("ddp", {}, DDP()),
    ("ddp", {"sync_bn": True, "comm_hook": "bf16", "bucket_cap_mb": 5},
     DDP(sync_bn=True, comm_hook="bf16", bucket_cap_mb=5)),
    ("ddp", {"activation_checkpointing": True, "gradient_as_bucket_view": True},
     DDP(activation_checkpointing=True, extra={"gradient_as_bucket_view": True})),
    ("fsdp", {"reshard_after_forward": False, "cpu_offload": True},
     FSDP(reshard_after_forward=False, cpu_offload=True)),
    ("fsdp", {"shard": [nn.Linear], "mp_policy": None},
     FSDP(shard=[nn.Linear], extra={"mp_policy": None})),
    ("hsdp", {"replicate": 2}, HSDP(replicate=2)),
])  # fmt: skip
def test_old_keywords_build_the_same_object(
    name: str, options: dict[str, Any], expected: Strategy
) -> None:
    # prepare_model always passes all its loose keywords; those at their defaults ask for nothing
    loose = _prepare_model_keywords()
    built = resolve(name, **{**loose, **options})
    assert type(built) is type(expected) and built == expected


def test_an_object_passes_through_and_refuses_loose_keywords_beside_it() -> None:
    spec = FSDP(reshard_after_forward=False)
    assert resolve(spec, sync_bn=False, comm_hook=None, shard=None) is spec
    with _refused("cpu_offload= goes inside the strategy object (FSDP(...))"):
        resolve(spec, cpu_offload=True)
    with _refused("reshard_after_forward= goes inside the strategy object"):
        resolve(spec, reshard_after_forward=True)


@pytest.mark.parametrize(("strategy", "options", "message"), [
    ("zero", {}, "strategy must be one of ddp, fsdp, hsdp"),
    (FSDP, {},
     "strategy must be one of ddp, fsdp, hsdp or a distrain.DDP/FSDP/HSDP object, got <class"),
    ("ddp", {"cpu_offload": True}, "cpu_offload=True needs strategy='fsdp' or 'hsdp' on a GPU"),
    ("fsdp", {"cpu_offload": True},
     "cpu_offload=True needs strategy='fsdp' or 'hsdp' on a GPU (on the CPU"),
    (FSDP(cpu_offload=True), {},
     "cpu_offload=True needs strategy='fsdp' or 'hsdp' on a GPU (on the CPU"),
    ("fsdp", {"replicate": 2}, "replicate= needs strategy='hsdp'"),
    ("fsdp", {"comm_hook": "bf16"}, "comm_hook is a DDP feature"),
    ("fsdp", {"sync_bn": True}, "sync_bn=True cannot be used with strategy='fsdp'"),
    ("fsdp", {"shard": [int]}, "shard= takes nn.Module classes"),
    ("ddp", {"comm_hook": "int8"}, "comm_hook must be one of"),
])  # fmt: skip
def test_bad_options_refused_on_any_world_size(
    strategy: Any, options: dict[str, Any], message: str
) -> None:
    """Options that cannot apply fail before any process group is involved (one process too)."""
    with _refused(message):
        prepare(nn.Sequential(nn.Linear(2, 2)), strategy, device=torch.device("cpu"),
                precision="fp32", distributed=False, num_nodes=1, **options)  # fmt: skip


@pytest.mark.parametrize(
    "strategy", ["ddp", "fsdp", "hsdp", DDP(sync_bn=True), FSDP(), HSDP(replicate=2)]
)
def test_one_process_gives_the_plain_model(strategy: Any) -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    prepared = prepare(
        model,
        strategy,
        device=torch.device("cpu"),
        precision="fp32",
        distributed=False,
        num_nodes=1,
    )
    assert prepared is model
