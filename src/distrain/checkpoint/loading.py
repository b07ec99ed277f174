"""Reading a verified checkpoint directory back into the registered objects."""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist

from distrain.checkpoint import dcp_io, legacy
from distrain.checkpoint.files import (
    FORMAT,
    LEGACY_FORMAT,
    SHARED_FILE,
    CheckpointError,
    _warn,
    load_file,
    rank_file,
    read_manifest,
)
from distrain.checkpoint.state import Registered, set_rng_state


def load(
    path: str, reg: Registered, rank: int, is_main: bool, group: dist.ProcessGroup | None
) -> dict[str, Any]:
    """Load the verified checkpoint at `path` into `reg` (DCP collectively over `group`, or
    alone) and this rank's RNG state; return rank 0's shared part (step, loader positions, extra).
    """
    manifest, problem = read_manifest(path)
    if manifest is None:  # verified by the leader a moment ago; changed since?
        err = CheckpointError(f"cannot resume: {problem}")
        err.recurs = False  # a restart verifies afresh
        raise err
    if manifest["format"] == LEGACY_FORMAT:
        shared = legacy.load(path, reg)
    else:
        shared = load_file(os.path.join(path, SHARED_FILE))
        if not isinstance(shared, dict) or shared.get("format") != FORMAT:
            raise CheckpointError(f"{path}/{SHARED_FILE}: unknown checkpoint format")
        missing = [n for n in reg.modules | reg.optimizers if n not in shared.get("dcp", [])]
        if missing:
            raise CheckpointError(
                f"{path} has no state for {', '.join(missing)} (saved: "
                f"{', '.join(shared.get('dcp', []))})"
            )
        if reg.modules:
            state = reg.dcp_target(dcp_io.saved_keys(path))
            dcp_io.load(state, path, group)
            try:
                reg.load_dcp_state(state)
            except (RuntimeError, ValueError, KeyError) as err:
                first = (str(err).strip().splitlines() or [""])[0][:300]
                raise CheckpointError(
                    f"cannot resume the model/optimizer from {path}: {type(err).__name__}: {first}"
                ) from None
        load_plain(reg, shared, path)
    name = rank_file(rank)
    if name in manifest["files"]:
        own = load_file(os.path.join(path, name))
        set_rng_state(own["rng"])
        missing = reg.load_local_buffers(own["buffers"]) if "buffers" in own else []
        if missing and is_main:
            _warn(
                f"{path}/{name} has no own copy of "
                f"{', '.join(missing[:3])}{' …' if len(missing) > 3 else ''}: "
                "those buffers are rank 0's saved copy"
            )
    else:
        _warn(
            f"{os.path.join(path, name)} absent (saved on {shared['world_size']} ranks): this rank "
            "keeps its own RNG state"
        )
    return shared


def load_plain(reg: Registered, shared: dict[str, Any], where: str) -> None:
    """Restore the plain objects (scheduler, scaler, loaders …) from the shared part."""
    states = shared.get("objects", {})
    missing = [name for name in reg.plain if name not in states]
    if missing:
        raise CheckpointError(
            f"{where} has no state for {', '.join(missing)} (saved: {', '.join(states)})"
        )
    for name, obj in reg.plain.items():
        try:
            obj.load_state_dict(states[name])
        except ValueError as err:
            raise CheckpointError(f"cannot resume {name} from {where}: {err}") from None
