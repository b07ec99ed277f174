"""worker/rehearse/patches.py and rehearse/__init__.py: pure mappings (nccl → gloo, stand-ins)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import torch

from distrain.worker import rehearse
from distrain.worker.rehearse import devices, patches


@pytest.fixture(autouse=True)
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    fresh: Counter[str] = Counter()
    monkeypatch.setattr(patches, "MAPPED", fresh)
    monkeypatch.setattr(devices, "MAPPED", fresh)
    return fresh


@pytest.mark.parametrize("backend", ["nccl", "NCCL", "cpu:gloo,cuda:nccl", None])
def test_nccl_or_no_backend_becomes_gloo(backend: str | None, counts: Counter[str]) -> None:
    assert patches._gloo(backend) == "gloo"
    assert counts["nccl → gloo"] == 1


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_other_backends_are_kept(backend: str, counts: Counter[str]) -> None:
    assert patches._gloo(backend) == backend
    assert counts == Counter()


@pytest.mark.parametrize(("raw", "count"), [(None, 0), ("", 0), ("4", 4), ("x", 0), ("-2", 0)])
def test_requested_stand_ins(monkeypatch: pytest.MonkeyPatch, raw: str | None, count: int) -> None:
    if raw is not None:
        monkeypatch.setenv("DISTRAIN_CPU_REHEARSAL", raw)
    assert rehearse.requested() == count


def test_install_does_nothing_unless_asked() -> None:
    assert rehearse.install() is False


def autocast_init() -> object:
    from distrain.process import patching

    with patching.recording() as found:
        patches._amp()
    return next(p.replacement for p in found if p.name == "__init__" and p.owner is torch.autocast)


def test_cuda_fp16_autocast_says_what_it_costs(
    monkeypatch: pytest.MonkeyPatch, counts: Counter[str]
) -> None:
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(patches, "say_once", lambda key, line: said.append((key, line)))
    monkeypatch.setattr(patches, "cpu_flags", lambda: {"avx2"})
    init = autocast_init()
    for dtype in (torch.bfloat16, None):  # None: CUDA's default, float16
        ctx = torch.autocast.__new__(torch.autocast)
        init(ctx, "cuda", dtype=dtype)
        assert (ctx.device, ctx.fast_dtype) == ("cpu", dtype or torch.float16)
    assert said == [("amp-fp16", patches.fp16_cost_line({"avx2"}))]
    assert counts["autocast(cuda) → autocast(cpu)"] == 2


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"avx2"}, "in emulation (no avx512_fp16/amx_fp16): expect ~10-20x the fp32 step time"),
        ({"amx_fp16", "avx2"}, "natively (amx_fp16)"),
    ],
)
def test_fp16_cost_line_names_the_cpu(flags: set[str], words: str) -> None:
    assert patches.fp16_cost_line(flags).endswith(words)


def test_a_forked_child_reports_what_it_mapped_itself_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts: Counter[str]
) -> None:
    """A Process-loop child inherits its parent's counts at fork; it reports only its own (the
    parent reports the rest), once, though both multiprocessing's exit and atexit may call."""
    from distrain.events import read_events
    from distrain.events.stream import stream

    monkeypatch.setenv("DISTRAIN_JOB_DIR", str(tmp_path))
    monkeypatch.setattr(rehearse, "_reported_in", None)
    counts.update({"set_device": 1, ".cuda()": 5})
    inherited = Counter(counts)  # what _forked() notes in the child
    counts.update({".cuda()": 3, "nccl → gloo": 1})
    rehearse.write_counts(inherited)
    rehearse.write_counts(inherited)
    events, _ = read_events(stream(str(tmp_path)), kind="rehearsal")
    assert [e["counts"] for e in events] == [{".cuda()": 3, "nccl → gloo": 1}]


def test_a_forked_child_that_mapped_nothing_reports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts: Counter[str]
) -> None:
    """A DataLoader worker maps nothing of its own: no event, so no process in the summary."""
    from distrain.events.stream import stream

    monkeypatch.setenv("DISTRAIN_JOB_DIR", str(tmp_path))
    monkeypatch.setattr(rehearse, "_reported_in", None)
    counts.update({".cuda()": 5})
    rehearse.write_counts(Counter(counts))
    assert not os.path.exists(stream(str(tmp_path)))
