"""The stand-in CUDA generators: their own seeds and states, apart from the CPU's."""

from __future__ import annotations

from typing import Any

import torch

from distrain.worker.rehearse.fake_state import _index, _State

# -- the CUDA generator: its own seeds and states, apart from the CPU's
# -----------------------------
#: seeds are unsigned 64-bit, as torch's (torch.seed() draws them from the whole range)
_U64 = 1 << 64


def manual_seed(seed: int) -> None:
    """Seed the (stand-in) current device's generator; the CPU's stream is untouched."""
    _State.seeds[_State.current] = int(seed) % _U64


def manual_seed_all(seed: int) -> None:
    """Seed every stand-in device's generator."""
    for i in range(_State.count):
        _State.seeds[i] = int(seed) % _U64


def initial_seed() -> int:
    """The current device's seed."""
    return _State.seeds.get(_State.current, 0)


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    """A state tensor that set_rng_state accepts back."""
    seed = _State.seeds.get(_index(device), 0)
    # the seed's 64 bits as an int64 (a seed of 2**63 or more would overflow it)
    return torch.tensor([seed - _U64 if seed >= _U64 // 2 else seed], dtype=torch.int64).view(
        torch.uint8
    )


def set_rng_state(state: torch.Tensor, device: Any = "cuda") -> None:
    """Restore a state from get_rng_state."""
    _State.seeds[_index(device)] = (
        int(state.view(torch.int64)[0]) % _U64 if state.numel() == 8 else 0
    )


def get_rng_state_all() -> list[torch.Tensor]:
    """Every stand-in device's state."""
    return [get_rng_state(i) for i in range(_State.count)]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    """Restore every stand-in device's state."""
    for i, state in enumerate(states):
        set_rng_state(state, i)
