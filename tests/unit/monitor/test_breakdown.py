"""The step breakdown's accounting (monitor/breakdown.py) and its window shares (status.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from distrain.events import job_events
from distrain.events.breakdown import PHASES, breakdown_fractions
from distrain.monitor import breakdown as bd_module
from distrain.monitor.breakdown import StepBreakdown, open_breakdown
from distrain.tools.top.status import window_breakdown


class FakeTime:
    """perf_counter() under the test's control."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(bd_module, "perf_counter", fake)
    return fake


def test_fractions_sum_to_one_and_tolerate_missing_and_negative() -> None:
    shares = breakdown_fractions({"data": 1.0, "compute": 3.0, "other": -2.0})
    assert shares["data"] == 0.25 and shares["compute"] == 0.75 and shares["other"] == 0.0
    assert set(shares) == set(PHASES) and abs(sum(shares.values()) - 1.0) < 1e-12
    assert breakdown_fractions({}) == dict.fromkeys(PHASES, 0.0)


def _one_step(
    bd: StepBreakdown,
    clock: FakeTime,
    param: torch.Tensor,
    *,
    data: float,
    compute: float,
    comm: float,
    opt: float,
    other: float,
    ctx_backward: bool = True,
) -> None:
    """Drive the hooks as a training loop would, with the fake clock advancing between them."""
    asked = clock.now
    clock.now += data
    bd.data(asked)
    bd._on_forward(nn.Module(), ())
    clock.now += compute
    bd._on_grad(param)
    clock.now += comm
    if ctx_backward:
        bd.backward_done()
    bd._on_optimizer_start(None, (), {})
    clock.now += opt
    bd.step_done()  # the step counter's hook comes first
    bd._on_optimizer_end(None, (), {})
    clock.now += other


@pytest.mark.parametrize("ctx_backward", [True, False])
def test_phases_are_the_intervals_between_hook_points(clock: FakeTime, ctx_backward: bool) -> None:
    bd = StepBreakdown()
    try:
        p = torch.zeros(1)
        for _ in range(4):  # the first step is warm-up and not counted
            _one_step(
                bd,
                clock,
                p,
                data=0.5,
                compute=2.0,
                comm=1.0,
                opt=0.25,
                other=0.25,
                ctx_backward=ctx_backward,
            )
        steps, totals = bd.snapshot()
        assert steps == 3
        assert totals["data"] == pytest.approx(1.5) and totals["compute"] == pytest.approx(6.0)
        assert totals["comm"] == pytest.approx(3.0) and totals["optimizer"] == pytest.approx(0.75)
        assert totals["other"] == pytest.approx(0.75) and totals["checkpoint"] == 0.0
        summary = bd.summary()
        assert summary["compute_median_s"] == pytest.approx(2.0) and summary[
            "step_median_s"
        ] == pytest.approx(4.0)
        assert summary["fractions"]["compute"] == pytest.approx(0.5)
    finally:
        bd.close()


def test_plain_backward_ends_at_the_next_point_distrain_sees(clock: FakeTime) -> None:
    """Without ctx.backward, comm runs from the last gradient to the optimizer step (or batch)."""
    bd = StepBreakdown()
    try:
        p = torch.zeros(1)
        for _ in range(2):
            _one_step(
                bd,
                clock,
                p,
                data=0.0,
                compute=1.0,
                comm=0.0,
                opt=0.0,
                other=0.0,
                ctx_backward=False,
            )
            # gradient accumulation: a second backward whose end is the next batch request
        bd._on_forward(nn.Module(), ())
        clock.now += 1.0
        bd._on_grad(p)
        clock.now += 0.5  # e.g. gradient clipping, or DDP's wait
        bd.data(clock.now)
        bd.step_done()
        _, totals = bd.snapshot()
        assert totals["comm"] == pytest.approx(0.5) and totals["compute"] == pytest.approx(2.0)
    finally:
        bd.close()


def test_checkpoint_stall_is_its_own_phase(clock: FakeTime) -> None:
    bd = StepBreakdown()
    try:
        p = torch.zeros(1)
        _one_step(bd, clock, p, data=0.0, compute=1.0, comm=0.0, opt=0.0, other=0.0)
        clock.now += 3.0
        bd.checkpoint(3.0)
        _one_step(bd, clock, p, data=0.0, compute=1.0, comm=0.0, opt=0.0, other=0.0)
        _, totals = bd.snapshot()
        assert totals["checkpoint"] == pytest.approx(3.0) and totals["other"] == pytest.approx(0.0)
    finally:
        bd.close()


def test_real_model_and_optimizer_feed_it_and_summary_file(
    tmp_path: Path, writes_environ: None
) -> None:
    """Torch's own hooks (forward pre-hook, post-accumulate-grad, optimizer step) reach it."""
    bd = StepBreakdown(rank=3, world_size=4)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    bd.watch(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    counter = opt.register_step_post_hook(lambda *a: bd.step_done())  # as the step counter does
    for _ in range(5):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    bd.job_dir = str(tmp_path)
    bd.finish()
    (event,) = job_events(str(tmp_path), "breakdown")
    written = event["summary"]
    assert written["steps"] == 4 and written["rank"] == 3 and written["world_size"] == 4
    assert written["seconds"]["compute"] > 0 and written["compute_median_s"] > 0
    assert abs(sum(written["fractions"].values()) - 1) < 1e-3
    counter.remove()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    assert bd._grads == 0 and bd._fwd is None and bd._opt is None  # finish() removed every hook


def test_off_switch_gives_none() -> None:
    assert open_breakdown(False, 0, 1, cuda=False) is None


def _record(t: float, steps: int, **seconds: float) -> dict:
    return {"t": t, "rank": 0, "breakdown_s": {"steps": steps, **seconds}}


def test_window_shares_come_from_the_records_inside_the_window() -> None:
    records = [
        _record(0.0, 10, data=10.0, compute=0.0),  # outside a 5 s window
        _record(6.0, 20, data=10.0, compute=1.0),
        _record(10.0, 30, data=11.0, compute=4.0),
    ]
    shares = window_breakdown(records, window=5.0)
    assert shares is not None and shares["data"] == 0.25 and shares["compute"] == 0.75
    # no step inside the window: the whole run so far
    idle = records + [_record(20.0, 30, data=11.0, compute=4.0)]
    assert window_breakdown(idle, window=5.0) == window_breakdown(
        [_record(0, 30, data=11.0, compute=4.0)], 5.0
    )
    assert window_breakdown([{"t": 1.0, "rank": 0}], 5.0) is None


def test_after_the_first_step_only_the_last_gradient_hook_and_no_forward_hook_remain() -> None:
    """The slimming keeping the cost under 1 %: compute then starts when the batch is handed out."""
    bd = StepBreakdown()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    bd.watch(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    counter = opt.register_step_post_hook(lambda *a: bd.step_done())
    try:
        for _ in range(2 + bd_module.CPU_SAMPLE_EVERY):  # CPU time is read in one step of 8
            bd.data(bd_module.perf_counter())
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
        forward, grads = bd._watched[0]
        assert len(grads) == 1 and any(
            next(iter(grads.values()))[0] is p for p in model[0].parameters()
        )  # came last
        assert not model._forward_pre_hooks and bd._forward_from_data
        steps, totals = bd.snapshot()
        assert (
            steps == 1 + bd_module.CPU_SAMPLE_EVERY
            and totals["compute"] > 0
            and bd.summary()["compute_cpu_median_s"] > 0
        )
    finally:
        counter.remove()
        bd.close()


class FakeEvent:
    """A CUDA event stand-in: recorded at the fake GPU time, done when the test says so."""

    def __init__(self, gpu: FakeGPU) -> None:
        self.gpu, self.t, self.recorded = gpu, None, 0

    def record(self) -> None:
        self.t, self.recorded = self.gpu.now, self.recorded + 1

    def query(self) -> bool:
        return self.gpu.done_until >= self.t

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1000.0  # milliseconds, as torch's


class FakeGPU:
    def __init__(self) -> None:
        self.now, self.done_until, self.made = 0.0, -1.0, 0


def test_cuda_events_are_read_only_once_done_and_reused_after(
    monkeypatch: pytest.MonkeyPatch, clock: FakeTime
) -> None:
    """The GPU path: no step is accounted before its end event is done (no waiting), then all are"""
    gpu = FakeGPU()

    def event(enable_timing: bool) -> FakeEvent:
        gpu.made += 1
        return FakeEvent(gpu)

    monkeypatch.setattr(bd_module.torch.cuda, "Event", event)
    bd = StepBreakdown(cuda=True)
    try:
        p = torch.zeros(1)
        for _ in range(4):
            bd._on_forward(nn.Module(), ())
            gpu.now += 2.0  # the GPU's compute
            bd._on_grad(p)
            gpu.now += 1.0  # the all-reduce the stream waits for
            bd.backward_done()
            bd._on_optimizer_start(None, (), {})
            gpu.now += 0.5
            bd.step_done()
            bd._on_optimizer_end(None, (), {})
        assert (
            bd.snapshot()[0] == 0
        )  # nothing done on the GPU yet: nothing read, nothing waited for
        gpu.done_until = gpu.now
        bd._on_forward(nn.Module(), ())
        # the next step's end reads every finished one (itself included: no GPU time)
        bd.step_done()
        steps, totals = bd.snapshot()
        assert steps == 4
        assert totals["compute"] == pytest.approx(6.0) and totals["comm"] == pytest.approx(3.0)
        assert totals["optimizer"] == pytest.approx(1.5) and totals["other"] == pytest.approx(0.0)
        made, other = gpu.made, totals["other"]
        for _ in range(
            3
        ):  # events come back to the pool once read, never while a step still needs them
            bd._on_forward(nn.Module(), ())
            gpu.now += 1.0
            bd._on_optimizer_start(None, (), {})
            gpu.now += 0.25
            gpu.done_until = gpu.now
            bd.step_done()  # its end closes the optimizer's span too
            gpu.now += 0.5  # after the step's end: the next step's time
        assert bd.snapshot()[1]["other"] - other == pytest.approx(1.0 + 1.5 + 1.5)
        assert bd.snapshot()[1]["optimizer"] - totals["optimizer"] == pytest.approx(0.75)
        assert (
            gpu.made == made
            and bd.summary()["device"] == "cuda"
            and bd.summary()["compute_cpu_median_s"] is None
        )
    finally:
        bd.close()
