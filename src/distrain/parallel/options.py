"""Strategy objects: ``DDP(...)``, ``FSDP(...)``, ``HSDP(...)`` hold a strategy's options, checked.

    model = ctx.prepare_model(model, strategy=distrain.FSDP(reshard_after_forward=False))

The strings ``"ddp"``, ``"fsdp"`` and ``"hsdp"`` stay as aliases: :data:`STRATEGIES` maps a name
to its class (as Lightning Fabric's strategy registry does), and the loose keywords of the older
call ``prepare_model(model, "fsdp", cpu_offload=True)`` build the same object (:func:`resolve`).
A bad option is a one-line DistrainError naming the option and the strategy, raised when the
object is built: it fails on every world size, also in a plain ``python train.py``.
:class:`Decorated` is a strategy a job-level feature prepares around the script's.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from distrain.errors import DistrainError

S = TypeVar("S", bound="Strategy")

#: what ``shard=`` may be: None (find repeated blocks), block classes, or a predicate on a module
ShardSpec = None | type | Iterable[type] | Callable[[nn.Module], bool]

#: prepare_model's loose keywords and their defaults: one at its default asks for nothing, so it
#: is accepted beside any strategy (the call always passes all of them)
LOOSE_DEFAULTS: dict[str, Any] = {
    "sync_bn": False,
    "comm_hook": None,
    "shard": None,
    "activation_checkpointing": False,
    "cpu_offload": False,
    "replicate": None,
}


def check_shard(shard: ShardSpec) -> tuple[type, ...] | None:
    """The block classes `shard` names (None for None or a function); DistrainError otherwise."""
    if shard is None:
        return None
    if isinstance(shard, type) or isinstance(shard, (list, tuple, set, frozenset)):
        classes = (shard,) if isinstance(shard, type) else tuple(shard)
        bad = [c for c in classes if not (isinstance(c, type) and issubclass(c, nn.Module))]
        if bad:
            raise DistrainError(
                f"shard= takes nn.Module classes or a function of a module, got {bad[0]!r}"
            )
        return classes
    if callable(shard):
        return None
    raise DistrainError(
        f"shard= takes None, nn.Module classes or a function of a module, got {shard!r}"
    )


def _misplaced(option: str, name: str) -> str:
    """Why `option` is no option of strategy `name` (the texts prepare_model has always given)."""
    if option == "sync_bn":
        return (
            f"sync_bn=True cannot be used with strategy={name!r}: use strategy='ddp' "
            "for SyncBatchNorm"
        )
    if option == "comm_hook":
        return f"comm_hook is a DDP feature; strategy={name!r} has none"
    if option == "cpu_offload":
        return f"cpu_offload=True needs strategy='fsdp' or 'hsdp' on a GPU, not strategy={name!r}"
    if option == "replicate":
        return f"replicate= needs strategy='hsdp', got strategy={name!r}"
    return (
        f"{option}= is no option of strategy {name!r} ({STRATEGIES[name].__name__}); its "
        f"options: {', '.join(_own_fields(STRATEGIES[name]))}, extra="
    )


def _own_fields(cls: type[Strategy]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]


def _named_options(cls: type[S]) -> type[S]:
    """Make an unknown keyword of `cls(...)` a one-line DistrainError, not Python's TypeError."""
    init = cls.__init__
    known = {f.name for f in dataclasses.fields(cls)}

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        for option in kwargs:
            if option not in known:
                raise DistrainError(_misplaced(option, cls.name))
        init(self, *args, **kwargs)

    cls.__init__ = checked  # type: ignore[method-assign]
    return cls


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """What every strategy has: which blocks are units, activation checkpointing, extra arguments.

    - ``shard``: which submodules are blocks. None finds classes repeated side by side in a
      ModuleList/Sequential/ModuleDict; or block classes, or a ``module -> bool`` function.
    - ``activation_checkpointing``: wrap each block in torch's checkpoint_wrapper (activations
      recomputed in backward).
    - ``extra``: further keyword arguments of the torch call underneath, checked by name.
    """

    #: the alias in :data:`STRATEGIES` (``strategy="ddp"`` & co.)
    name: ClassVar[str] = ""
    #: the torch call ``extra`` goes to, for messages
    callee: ClassVar[str] = ""

    shard: ShardSpec = None
    activation_checkpointing: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", dict(self.extra))  # a copy: the object stays frozen
        self._require(
            isinstance(self.activation_checkpointing, bool),
            "activation_checkpointing",
            "must be True or False",
        )
        try:
            check_shard(self.shard)
        except DistrainError as err:
            raise DistrainError(f"{type(self).__name__}: {err}") from None
        accepted = self._callee_parameters()
        for key in self.extra:
            if key in _own_fields(type(self)):
                self._require(
                    False,
                    "extra",
                    f"names {key!r}, an option of its own: {type(self).__name__}({key}=...)",
                )
            self._require(
                key in accepted,
                "extra",
                f"names {key!r}, which {self.callee} does not take (it takes "
                f"{', '.join(sorted(accepted - set(_own_fields(type(self)))))})",
            )

    def _require(self, ok: bool, option: str, problem: str) -> None:
        if not ok:
            value = getattr(self, option)
            raise DistrainError(f"{type(self).__name__}: {option}={value!r} {problem}")

    def _callee_parameters(self) -> set[str]:
        raise NotImplementedError

    def callee_options(self) -> dict[str, Any]:
        """Keyword arguments of the torch call: options set away from their default, then extra."""
        raise NotImplementedError

    @classmethod
    def from_kwargs(cls: type[S], **options: Any) -> S:
        """The object an older ``prepare_model(model, "<name>", **options)`` call means.

        Options of this strategy become fields, prepare_model's other loose keywords must be at
        their defaults, anything else goes to ``extra`` (the torch call's own arguments).
        """
        own = set(_own_fields(cls))
        fields: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in options.items():
            if key in own:
                fields[key] = value
            elif key in LOOSE_DEFAULTS:
                if value is not LOOSE_DEFAULTS[key]:
                    raise DistrainError(_misplaced(key, cls.name))
            else:
                extra[key] = value
        return cls(**fields, extra=extra)


def _parameters_of(function: Any) -> set[str]:
    names = set(inspect.signature(function).parameters)
    return names - {"self", "module"}  # the model is distrain's to pass


@_named_options
@dataclass(frozen=True, kw_only=True)
class DDP(Strategy):
    """Replicated: every rank holds the whole model; DistributedDataParallel all-reduces gradients.

    - ``sync_bn``: cross-process BatchNorm (torch's SyncBatchNorm on CUDA, CPUSyncBatchNorm
      elsewhere).
    - ``comm_hook``: compress the all-reduce: ``"bf16"``, ``"fp16"``,
      ``"powersgd[:rank=N,start=N]"``.
    - ``bucket_cap_mb``, ``find_unused_parameters``, ``static_graph``: DistributedDataParallel's
      own.
    - ``shard`` only says which blocks ``activation_checkpointing`` wraps.
    """

    name: ClassVar[str] = "ddp"
    callee: ClassVar[str] = "DistributedDataParallel"

    sync_bn: bool = False
    comm_hook: str | None = None
    bucket_cap_mb: float | None = None
    find_unused_parameters: bool = False
    static_graph: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for flag in ("sync_bn", "find_unused_parameters", "static_graph"):
            self._require(isinstance(getattr(self, flag), bool), flag, "must be True or False")
        cap = self.bucket_cap_mb
        self._require(
            cap is None
            or (isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0),
            "bucket_cap_mb",
            "must be a number of MiB > 0",
        )
        if self.comm_hook is not None:
            from distrain.parallel.comm_hooks import parse_hook

            self._require(
                isinstance(self.comm_hook, str), "comm_hook", "must be a hook name such as 'bf16'"
            )
            try:
                parse_hook(
                    self.comm_hook
                )  # a bad name fails on every world size, not only on N > 1
            except ValueError as err:
                raise DistrainError(f"DDP: {err}") from None

    def _callee_parameters(self) -> set[str]:
        from torch.nn.parallel import DistributedDataParallel

        return _parameters_of(DistributedDataParallel.__init__)

    def callee_options(self) -> dict[str, Any]:
        """DistributedDataParallel's keyword arguments: the ones set here, then ``extra``."""
        options: dict[str, Any] = {}
        if self.bucket_cap_mb is not None:
            options["bucket_cap_mb"] = self.bucket_cap_mb
        if self.find_unused_parameters:
            options["find_unused_parameters"] = True
        if self.static_graph:
            options["static_graph"] = True
        return {**options, **self.extra}


@_named_options
@dataclass(frozen=True, kw_only=True)
class FSDP(Strategy):
    """Sharded over all ranks with FSDP2 (``fully_shard``): parameters, gradients, optimizer state.

    - ``cpu_offload``: FSDP's CPUOffloadPolicy (shards in host memory; GPU training only).
    - ``reshard_after_forward``: fully_shard's own (False keeps gathered weights for backward).
    - ``extra``: other fully_shard arguments (``mp_policy=``, ``shard_placement_fn=`` …).
    """

    name: ClassVar[str] = "fsdp"
    callee: ClassVar[str] = "fully_shard"

    cpu_offload: bool = False
    reshard_after_forward: bool | int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(isinstance(self.cpu_offload, bool), "cpu_offload", "must be True or False")
        self._require(
            self.reshard_after_forward is None or isinstance(self.reshard_after_forward, int),
            "reshard_after_forward",
            "must be True, False or a number of ranks",
        )

    def _callee_parameters(self) -> set[str]:
        from torch.distributed.fsdp import fully_shard

        return _parameters_of(fully_shard)

    def callee_options(self) -> dict[str, Any]:
        """fully_shard's keywords: those set here, then ``extra`` (mesh, precision: distrain's)."""
        options: dict[str, Any] = {}
        if self.reshard_after_forward is not None:
            options["reshard_after_forward"] = self.reshard_after_forward
        return {**options, **self.extra}


@_named_options
@dataclass(frozen=True, kw_only=True)
class HSDP(FSDP):
    """FSDP on a 2-D mesh: ``replicate`` groups (default: one per node), each sharding its ranks.

    Gradients are reduce-scattered inside a group and all-reduced across groups; the world size
    must divide by ``replicate``.
    """

    name: ClassVar[str] = "hsdp"

    replicate: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        r = self.replicate
        self._require(
            r is None or (isinstance(r, int) and not isinstance(r, bool) and r >= 1),
            "replicate",
            "must be a whole number of replica groups >= 1",
        )


#: the aliases: a strategy's name -> its class
STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (DDP, FSDP, HSDP)}


def resolve(strategy: str | Strategy, **options: Any) -> Strategy:
    """The strategy object for prepare_model's `strategy` argument and its loose keywords.

    An object is taken as it is (its options live in it, so loose keywords beside it must be at
    their defaults); a name is looked up in :data:`STRATEGIES` and built from the keywords.
    """
    if isinstance(strategy, Strategy):
        for key, value in options.items():
            if key not in LOOSE_DEFAULTS or value is not LOOSE_DEFAULTS[key]:
                raise DistrainError(
                    f"{key}= goes inside the strategy object ({type(strategy).__name__}(...)), not "
                    "beside it in prepare_model"
                )
        return strategy
    cls = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    if cls is None:
        raise DistrainError(
            f"strategy must be one of {', '.join(STRATEGIES)} or a distrain.DDP/FSDP/HSDP object, "
            f"got {strategy!r}"
        )
    return cls.from_kwargs(**options)


# A strategy decorated by a job-level feature: the feature prepares the model around it.
# ``distrain run --replicas`` is one: inside a replica group the script's own strategy (DDP or
# FSDP), across the groups TorchFT's fault-tolerant average (worker/replicas/models.py).  The core
# Context resolves the script's strategy, lets its training layer decorate it (worker/layer.py),
# and :func:`distrain.parallel.prepare` hands a decorated one to the feature.
@dataclass(frozen=True)
class Decorated:
    """The script's strategy (`inner`) with the feature's own preparation (`prepare_with`)."""

    inner: Strategy
    prepare_with: Callable[[nn.Module, torch.device, Strategy], nn.Module]

    def prepare(self, model: nn.Module, device: torch.device) -> nn.Module:
        """`model` prepared by the feature, around the script's strategy."""
        return self.prepare_with(model, device, self.inner)
