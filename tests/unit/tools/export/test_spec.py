"""tools/export/spec.py: the JobSpec every export target renders, --nnodes parsing, DNS names."""

from __future__ import annotations

import re

import pytest

from distrain.errors import UsageError
from distrain.tools.export.spec import JobSpec, dns_name, parse_nnodes

#: RFC 1123 label, what Kubernetes requires of metadata.name (and compose of project names)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_name_comes_from_the_script() -> None:
    assert JobSpec("examples/Train_Digits.py").name == "train-digits"
    assert JobSpec("t.py", name="given").name == "given"


def test_static_and_elastic_sizes() -> None:
    static = JobSpec("t.py", min_nodes=3, max_nodes=3)
    elastic = JobSpec("t.py", min_nodes=1, max_nodes=4)
    assert (static.elastic, static.nnodes) == (False, "3")
    assert (elastic.elastic, elastic.nnodes) == (True, "1:4")


def test_run_command_puts_launcher_flags_before_the_script() -> None:
    spec = JobSpec("src/t.py", ["--lr", "0.1 0.2"], nproc_per_node=4, name="job")
    assert spec.run_command("--nnodes", "2") == [
        "distrain", "run", "--nnodes", "2", "--nproc-per-node", "4", "--run-dir", "runs/job",
                                                 "src/t.py", "--lr", "0.1 0.2"]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), [("2", (2, 2)), ("1:4", (1, 4)), ("3:3", (3, 3))])
def test_parse_nnodes(text: str, expected: tuple[int, int]) -> None:
    assert parse_nnodes(text) == expected


@pytest.mark.parametrize("text", ["0", "4:2", "a", "1:2:3", "", "-1:2"])
def test_parse_nnodes_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--nnodes expects N or MIN:MAX"):
        parse_nnodes(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My_Train.v2", "my-train-v2"),
        ("--x--", "x"),
        ("!!!", "train"),
        ("ok-name-1", "ok-name-1"),
        ("a" * 80, "a" * 50),
    ],
)
def test_dns_name(text: str, expected: str) -> None:
    assert dns_name(text) == expected
    assert DNS_LABEL.match(expected)


def test_dns_name_truncation_never_ends_with_a_dash() -> None:
    assert DNS_LABEL.match(dns_name("a" * 49 + "_b"))
