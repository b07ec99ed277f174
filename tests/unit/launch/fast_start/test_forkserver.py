"""launch/fast_start/forkserver.py: the fast-start decisions that need no server: CVE check,
preloads (which script is forked: tests/unit/launch/test_command_line.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distrain.launch.fast_start.forkserver import (
    forkserver_unsafe,
    fresh_reason,
    top_level_imports,
)


@pytest.mark.parametrize("version", [(3, 10, 9), (3, 11, 1), (3, 12, 0), (3, 13, 2), (3, 9, 16)])
def test_fixed_pythons_are_safe(version: tuple[int, int, int]) -> None:
    assert forkserver_unsafe(version) is None


@pytest.mark.parametrize(
    ("version", "fixed"), [((3, 10, 8), "3.10.9"), ((3, 11, 0), "3.11.1"), ((3, 9, 15), "3.9.16")]
)
def test_vulnerable_pythons_name_the_fix(version: tuple[int, int, int], fixed: str) -> None:
    reason = forkserver_unsafe(version)
    assert reason is not None and "CVE-2022-42919" in reason and f"fixed in {fixed}" in reason


def test_top_level_imports_skip_the_scripts_own_modules(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text("")
    script = tmp_path / "train.py"
    script.write_text(
        "from __future__ import annotations\nimport os, json\nimport mymodel\nfrom "
        "collections import abc\n"
        "from . import sibling\nimport not_installed_anywhere_xyz\n\ndef f():\n    import csv\n"
    )
    assert top_level_imports(str(script)) == ["os", "json", "collections"]


def test_top_level_imports_of_unparsable_source_is_empty(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("def (:\n")
    assert top_level_imports(str(script)) == []


def _args(tmp_path: Path, source: str | None = "x = 1\n", **over: object) -> argparse.Namespace:
    script = tmp_path / "train.py"
    if source is not None:
        script.write_text(source)
    values = {
        "module": False,
        "no_python": False,
        "run_path": False,
        "training_script": str(script),
    }
    values.update(over)
    return argparse.Namespace(**values)


def test_fresh_reason(tmp_path: Path) -> None:
    assert fresh_reason(_args(tmp_path)) is None
    assert fresh_reason(_args(tmp_path, module=True)) == "-m runs a module"
    assert fresh_reason(_args(tmp_path, no_python=True)) == "--no-python runs a program"
    assert (
        fresh_reason(_args(tmp_path, run_path=True))
        == "--run-path asks for torch's own runpy entrypoint"
    )
    reason = fresh_reason(_args(tmp_path, source="#!/bin/sh\necho hi(\n"))
    assert reason is not None and reason.endswith(
        "is not Python source distrain can fork (SyntaxError)"
    )


def test_the_fork_server_is_told_from_the_tracker_by_its_command() -> None:
    """The stdlib ends both launches with ``-c COMMAND``, whatever interpreter options precede."""
    from distrain.launch.fast_start.server_fork import _SERVER_MAIN, _server_command

    server = f"{_SERVER_MAIN}; main(3, 4, ['__main__'], **{{}})"
    assert _server_command(["py", "-X", "importtime", "-W", "ignore", "-c", server]) == server
    tracker = "from multiprocessing.resource_tracker import main;main(5)"
    assert _server_command(["py", "-c", tracker]) is None
    assert _server_command(["py"]) is None
