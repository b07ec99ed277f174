"""scripts/code_metrics.py: a command-line scanner is found by what it does, not by its name."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import code_metrics  # noqa: E402


def _found(source: str) -> list[int]:
    return code_metrics.dash_tests(ast.parse(source).body[0])


def test_a_leading_dash_test_on_any_sequence_is_a_scanner() -> None:
    """Loops, subscripts and membership tests, whatever the sequence is called."""
    assert _found(
        "def f(words):\n    for w in words:\n        if w.startswith('-'):\n            pass"
    )
    assert _found("def f(words):\n    return [w for w in words if w == '--lr']")
    assert _found("def f(script):\n    return script[0].startswith('-')")
    assert _found("def f(tokens):\n    return '--help' in tokens")
    assert _found("def f(cmd):\n    return cmd[:1] == ['--']")
    assert _found("def f(xs):\n    return [v for v in xs if v.strip().startswith('-')]")


def test_one_string_is_not_a_command_line() -> None:
    """A parameter tested alone, a dash inside a range, an inner function's loop."""
    assert not _found("def f(name):\n    return name.startswith('--')")
    assert not _found("def f(rng):\n    return '-' in rng")
    assert not _found("def f(a):\n    def g(xs):\n        return '-x' in xs\n    return g")


def test_the_tree_s_scanners_include_the_ssh_re_implementation() -> None:
    """script_tail and its copy in launch/hosts/ssh.py are both found (neither holds `argv`)."""
    found = {":".join(s.split(":")[:2]) for s in code_metrics.command_line_scanners(
        REPO / "src" / "distrain")}  # fmt: skip
    assert "distrain/launch/command_line.py:script_tail" in found
    assert "distrain/launch/hosts/ssh.py:node_argv" in found


def test_feature_words_count_the_core_only() -> None:
    """The feature folders are not core; the seam names each feature, the core launcher none."""
    words = code_metrics.feature_words(REPO / "src" / "distrain")
    assert not any("/fast_start/" in m or "/replicas/" in m for m in words)
    assert words["distrain/launch/seam.py"].get("fast start", 0) > 0
    assert "distrain/launch/cli.py" not in words


def test_hsdp_s_replicate_is_not_the_replica_groups_word(tmp_path: Path) -> None:
    """`replicate=` (HSDP, torch's own word) is no feature word; `replica_group` is."""
    worker = tmp_path / "distrain" / "worker"
    worker.mkdir(parents=True)
    (worker / "a.py").write_text("def f(replicate=1):\n    '''the replicated state'''\n")
    (worker / "b.py").write_text("group = settings.replica_group  # TorchFT\n")
    words = code_metrics.feature_words(tmp_path / "distrain")
    assert "distrain/worker/a.py" not in words
    assert words["distrain/worker/b.py"] == {"replicas": 2}


def test_the_core_worker_and_checkpointer_name_no_feature() -> None:
    """A feature changes a worker through its seams (worker/start/__init__.py, the layer)."""
    words = code_metrics.feature_words(REPO / "src" / "distrain")
    core = {m: n for m, n in words.items() if m.startswith("distrain/worker/")}
    assert core == {} and "distrain/checkpoint/checkpointer.py" not in words
