"""tools/bench/comm.py: nccl-tests' bus bandwidth factors, size parsing, a row's algbw → busbw."""

from __future__ import annotations

import argparse

import pytest
import torch
import torch.distributed as dist

from distrain.errors import UsageError
from distrain.tools.bench import comm
from distrain.tools.bench.comm import bus_factor, human, parse_bytes, sizes


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
def test_bus_factors_are_nccl_tests(n: int) -> None:
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    assert (
        bus_factor("all_gather", n) == bus_factor("reduce_scatter", n) == pytest.approx((n - 1) / n)
    )
    assert bus_factor("broadcast", n) == 1.0


def test_bus_factor_of_an_unknown_op() -> None:
    with pytest.raises(ValueError, match="all_to_all"):
        bus_factor("all_to_all", 4)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("4K", 4096),
        ("64M", 64 * 2**20),
        ("1G", 2**30),
        ("1KiB", 1024),
        ("2mb", 2 * 2**20),
        ("0.5K", 512),
        (" 16M ", 16 * 2**20),
    ],
)
def test_parse_bytes(text: str, value: int) -> None:
    assert parse_bytes(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("big", "not a size: 'big'"),
        ("0", "size must be at least 1 byte"),
        ("0.1", "at least 1 byte"),
    ],
)
def test_parse_bytes_refuses(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_bytes(text)


def test_sizes_double_up_to_the_maximum_inclusive() -> None:
    assert sizes(8, 64) == [8, 16, 32, 64]
    assert sizes(1024, 5000, factor=4) == [1024, 4096]
    assert sizes(10, 5) == []


@pytest.mark.parametrize(
    ("n", "text"),
    [(4096, "4 KiB"), (3 * 2**20, "3 MiB"), (2**30, "1 GiB"), (1536, "1536 B"), (8, "8 B")],
)
def test_human(n: int, text: str) -> None:
    assert human(n) == text


@pytest.mark.parametrize(
    ("op", "world", "count"),
    [
        ("all_reduce", 4, 1000),
        ("all_gather", 4, 1000),
        ("reduce_scatter", 3, 999),
        ("broadcast", 2, 1000),
    ],
)
def test_measure_row_math(monkeypatch: pytest.MonkeyPatch, op: str, world: int, count: int) -> None:
    """With 2 ms per op: algbw = bytes / s / 1e9 and busbw = algbw × factor; no collective runs."""
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(
        comm,
        "time_op",
        lambda *args, **kwargs: (
            0.002,
            comm.make_buffers(op, 4000, world, "cpu", torch.float32).count,
        ),
    )
    row = comm.measure(op, 4000, 1, 1, "cpu", torch.float32, check=False)
    assert (row.count, row.bytes, row.dtype, row.correct) == (count, count * 4, "float32", None)
    assert row.time_us == pytest.approx(2000.0)
    assert row.algbw_gbps == pytest.approx(count * 4 / 0.002 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * bus_factor(op, world))


def test_buffers_split_evenly_over_ranks() -> None:
    gather = comm.make_buffers("all_gather", 1000, 3, "cpu", torch.float32)
    assert (gather.count, gather.inp.numel(), gather.out.numel()) == (249, 83, 249)
    scatter = comm.make_buffers("reduce_scatter", 8, 4, "cpu", torch.float64)
    assert (scatter.count, scatter.inp.numel(), scatter.out.numel()) == (4, 4, 1)


def _args(**over: object) -> argparse.Namespace:
    values = {
        "ops": "all_reduce,broadcast",
        "min_bytes": "1K",
        "max_bytes": "4K",
        "step_factor": 2,
        "iters": 5,
        "warmup": 1,
    }
    values.update(over)
    return argparse.Namespace(**values)


def test_validate_gives_ops_and_sizes() -> None:
    assert comm._validate(_args()) == (["all_reduce", "broadcast"], [1024, 2048, 4096])


@pytest.mark.parametrize(
    ("over", "message"),
    [({"ops": "all_reduce,gossip"}, "unknown op 'gossip' \\(choose from all_reduce"),
     ({"min_bytes": "8K"}, "--min-bytes 8K is larger than --max-bytes 4K"),
     ({"step_factor": 1}, "--step-factor must be at least 2"),
     ({"iters": 0}, "--iters must be >= 1")],
)  # fmt: skip
def test_validate_refuses(over: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        comm._validate(_args(**over))
