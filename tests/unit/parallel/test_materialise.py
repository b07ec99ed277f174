"""parallel/materialise.py: torch's modules built on the meta device initialise as eagerly built."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distrain.errors import DistrainError
from distrain.parallel import _materialise, is_on_meta


class Encoder(nn.Module):
    """Layers built one by one (each draws its weights) and an nn.TransformerEncoder (copies)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 16)
        self.blocks = nn.ModuleList(
            [nn.TransformerEncoderLayer(16, 4, 32, batch_first=True) for _ in range(2)]
        )
        self.stack = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(16, 2, 24, batch_first=True), 3, enable_nested_tensor=False
        )
        self.attn = nn.MultiheadAttention(
            16, 2, kdim=8, vdim=8
        )  # separate q/k/v weights, bias_k/bias_v off
        self.head = nn.Linear(16, 11)


def _eager_and_meta(
    build: type[nn.Module], seed: int = 3
) -> tuple[nn.Module, nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    eager = build()
    after_eager = torch.get_rng_state()
    torch.manual_seed(seed)
    with torch.device("meta"):
        meta = build()
    assert is_on_meta(meta)
    _materialise(meta)
    return eager, meta, after_eager, torch.get_rng_state()


def _assert_bitwise_equal(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert not sb[name].is_meta, name
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize(
    "build",
    [
        Encoder,
        lambda: nn.Transformer(16, 2, 2, 2, 24),
        lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True),
    ],
)
def test_torch_modules_on_meta_initialise_like_an_eager_build(build: type[nn.Module]) -> None:
    eager, meta, rng_eager, rng_meta = _eager_and_meta(build)
    _assert_bitwise_equal(eager, meta)
    assert torch.equal(rng_eager, rng_meta)  # the generator ends where the eager build left it


def test_cloned_layers_start_equal_as_in_an_eager_build() -> None:
    _, meta, _, _ = _eager_and_meta(Encoder)
    first, *rest = meta.stack.layers
    for layer in rest:
        assert torch.equal(layer.self_attn.in_proj_weight, first.self_attn.in_proj_weight)
        assert torch.equal(layer.linear2.bias, first.linear2.bias)
    assert not torch.equal(
        meta.blocks[0].linear1.weight, meta.blocks[1].linear1.weight
    )  # built separately: differ


def test_private_initialiser_of_a_user_class_is_not_trusted() -> None:
    class Mine(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(3))

        def _reset_parameters(self) -> None:
            nn.init.ones_(self.w)

    with torch.device("meta"):
        model = Mine()
    with pytest.raises(
        DistrainError, match="Mine built under init_model\\(\\) has tensors but no reset_parameters"
    ):
        _materialise(model)
