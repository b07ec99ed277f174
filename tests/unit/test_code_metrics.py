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
    # a token taken out of the line first, by index or by pop
    assert _found("def f(line):\n    i = 0\n    tok = line[i]\n    return tok == '--'")
    assert _found(
        "def f(line):\n    while line:\n        t = line.pop(0)\n"
        "        if t == '-v':\n            pass"
    )
    # the words of a command line split at blanks are still a command line
    assert _found("def f(text):\n    return [w for w in text.split() if w.startswith('-')]")


def test_one_string_is_not_a_command_line() -> None:
    """A parameter tested alone, a dash inside a range, an inner function's loop."""
    assert not _found("def f(name):\n    return name.startswith('--')")
    assert not _found("def f(rng):\n    return '-' in rng")
    assert not _found("def f(ranges):\n    return [r for r in ranges if '-' in r]")
    # a fixed command compared whole: no option looked for
    assert not _found("def f(cmd):\n    return cmd[1:4] == ['-m', 'distrain.cli', 'run']")
    assert not _found("def f(a):\n    def g(xs):\n        return '-x' in xs\n    return g")


def test_a_delimited_list_is_not_a_command_line() -> None:
    """A SLURM hostlist's ranges and CUDA_VISIBLE_DEVICES's numbers: items split at a comma."""
    hostlist = (
        "def f(item, inner):\n    for rng in inner.split(','):\n"
        "        if '-' in rng:\n            lo, hi = rng.split('-', 1)"
    )
    assert not _found(hostlist)
    devices = "def f(visible):\n    return [v for v in visible.split(',') if not v.startswith('-')]"
    assert not _found(devices)
    # the same tests on a command line's words are found
    assert _found(hostlist.replace("inner.split(',')", "argv").replace("'-' in", "'-x' in"))
    assert _found(devices.replace("visible.split(',')", "argv"))


def test_the_tree_s_scanners_are_counted_by_module() -> None:
    """The one walk of launch/command_line.py is found (its token is `tok = argv[i]`), and the
    modules that walk no command line (a hostlist, device numbers) are not."""
    found = {
        s.split(": ")[0]: s.split(": ")[1].split()
        for s in code_metrics.command_line_scanners(REPO / "src" / "distrain")
    }
    assert any(f.startswith("_split:") for f in found["distrain/launch/command_line.py"])
    assert "distrain/cluster/slurm.py" not in found
    # the goal held: every other module reads a command line through a parser or its helpers
    assert list(found) == ["distrain/launch/command_line.py"]


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
