"""checkpoint/state.py: who writes which replicated tensor, and each rank's own buffers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from distrain.checkpoint import dcp_io
from distrain.checkpoint.state import Registered, _balance


def test_buffers_are_written_by_rank_0_parameters_are_spread() -> None:
    tensors = {
        "w1": torch.zeros(100),
        "w2": torch.zeros(90),
        "bn.running_mean": torch.zeros(50),
        "bn.running_var": torch.zeros(50),
    }
    owner = _balance(tensors, 2, replicas_differ={"bn.running_mean", "bn.running_var"})
    assert owner["bn.running_mean"] == owner["bn.running_var"] == 0
    assert {owner["w1"], owner["w2"]} == {0, 1}  # both ranks write a share


def test_without_the_rule_a_buffer_may_land_on_rank_1() -> None:
    """The plain-BatchNorm bug: balanced like a parameter, a buffer is written by another rank."""
    tensors = {"w1": torch.zeros(100), "bn.running_mean": torch.zeros(50)}
    assert _balance(tensors, 2)["bn.running_mean"] == 1


def test_local_buffers_round_trip_in_place() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    reg = Registered.split({"model": model})
    model(torch.randn(8, 3))  # running statistics move
    saved = {k: {n: t.clone() for n, t in v.items()} for k, v in reg.local_buffers().items()}
    assert set(saved["model"]) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    model(torch.randn(8, 3))
    assert reg.load_local_buffers(saved) == []
    assert torch.equal(model[1].running_mean, saved["model"]["1.running_mean"])


def test_missing_own_buffers_are_named() -> None:
    reg = Registered.split({"model": nn.BatchNorm1d(2)})
    assert reg.load_local_buffers({"model": {}}) == [
        "model.running_mean",
        "model.running_var",
        "model.num_batches_tracked",
    ]


# -- optimizers without state (saved before their first step) ---------------------------------
def _fresh(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    return model, torch.optim.Adam(model.parameters(), lr=0.1)


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, only_first: bool) -> None:
    """A few Adam steps; `only_first`: the second layer never gets a gradient (nor Adam state)."""
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(5, 4, generator=data)
        opt.zero_grad(set_to_none=True)
        (model[0](x) if only_first else model(x)).square().sum().backward()
        opt.step()


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.usefixtures("writes_environ")  # Adam's first step imports inductor: its cache dir
def test_saving_an_optimizer_before_its_first_step_leaves_it_unstepped() -> None:
    """Torch's state_dict fills a fresh optimizer by a zero-lr step: Adam then counted step 1."""
    model, opt = _fresh()
    assert (
        Registered.split({"model": model, "optimizer": opt}).dcp_state()["optimizer"]["state"] == {}
    )
    assert not opt.state
    reference, ref_opt = _fresh()
    _train(model, opt, 3, only_first=False)
    _train(reference, ref_opt, 3, only_first=False)
    assert _same(model, reference)


CASES = {  # what happened before the save
    "nothing": lambda model, opt: None,
    "gradients, no step": lambda model, opt: model(torch.ones(2, 4)).sum().backward(),
    "steps, one layer without gradient": lambda model, opt: _train(model, opt, 2, True),
}


@pytest.mark.usefixtures("writes_environ")
@pytest.mark.parametrize("case", list(CASES))
def test_optimizer_state_the_checkpoint_lacks_stays_absent(case: str, tmp_path: Path) -> None:
    """It failed with "Missing key in checkpoint state_dict: optimizer.state.0.weight.step";
    restored, training goes on bit for bit like the run that saved."""
    model, opt = _fresh()
    CASES[case](model, opt)
    dcp_io.save(
        Registered.split({"model": model, "optimizer": opt}).dcp_state(), str(tmp_path), None
    )
    restored, restored_opt = _fresh(seed=1)  # other weights: the load must replace them
    reg = Registered.split({"model": restored, "optimizer": restored_opt})
    state = reg.dcp_target(dcp_io.saved_keys(str(tmp_path)))
    dcp_io.load(state, str(tmp_path), None)
    reg.load_dcp_state(state)
    assert restored_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    _train(model, opt, 3, only_first=False)
    _train(restored, restored_opt, 3, only_first=False)
    assert _same(model, restored)
