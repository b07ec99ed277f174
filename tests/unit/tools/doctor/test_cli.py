"""tools/doctor/cli.py: `distrain doctor` option validation and the --model-params count parser."""

from __future__ import annotations

import pytest

from distrain.errors import UsageError
from distrain.tools.doctor.cli import _options, _parser, parse_count


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25.6M", 25_600_000),
        ("11M", 11_000_000),
        ("500k", 500_000),
        ("1.5G", 1_500_000_000),
        ("1234", 1234),
    ],
)
def test_parse_count(text: str, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("2.01K", 2010), ("4.02M", 4_020_000)])
def test_parse_count_is_exact_for_decimal_counts(text: str, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["lots", "0", "-5M", "M", "1e13"])
def test_parse_count_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--model-params"):
        parse_count(text)


def test_options_defaults() -> None:
    args = _parser().parse_args([])
    opts = _options(args)
    assert opts.ports == (29500, 29400) and opts.master_addr is None and not opts.expect_gpu
    assert args.bandwidth_bytes == 16 * 2**20 and args.model_params == 25_600_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--ports", "80,x"], "--ports expects comma-separated numbers"),
     (["--ports", "0"], "port 0 is outside 1..65535"),
     (["--master-port", "29500"], "--master-port needs --master-addr"),
     (["--master-addr", "h", "--master-port", "70000"], "port 70000 is outside"),
     (["-n", "0"], r"--nproc must be at least 1 \(got 0\)"),
     (["--timeout", "0"], "--timeout must be positive"),
     (["--step-time", "-1"], "--step-time must be positive"),
     (["--bandwidth-bytes", "huge"], "not a size: 'huge'")],
)  # fmt: skip
def test_options_refuse(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _options(_parser().parse_args(argv))
