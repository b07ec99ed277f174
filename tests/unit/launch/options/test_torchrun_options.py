"""The fan-out's launcher splits its command line without importing torch
(launch/options/torchrun_options.py, command_line.split_without_torch)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distrain.launch.command_line import (
    parser_without_torch,
    run_parser,
    split,
    split_without_torch,
    takes_value,
)
from distrain.launch.options import torchrun_options

#: the table is for one torch release; under another (a newer torch in CI) the launcher falls back
#: to torch's parser, which test_the_recorded_table_is_the_installed_torchs checks instead
recorded_torch = pytest.mark.skipif(
    __import__("torch").__version__.split("+")[0] != torchrun_options.TORCH_VERSION,
    reason=f"the recorded torchrun table is torch {torchrun_options.TORCH_VERSION}'s",
)


def test_the_recorded_table_is_the_installed_torchs() -> None:
    import torch
    from torch.distributed.run import get_args_parser

    if torch.__version__.split("+")[0] != torchrun_options.TORCH_VERSION:
        # another torch: the recorded table must not be used (the launcher imports torch then)
        assert split_without_torch(["--hosts", "a,b", "x.py"]) is None
        return
    assert takes_value(get_args_parser()) == torchrun_options.OPTIONS, (
        "torch's options changed: regenerate with "
        "python3 -m distrain.launch.options.torchrun_options"
    )
    assert torchrun_options.values_now() == torchrun_options.VALUES, (
        "torch's checks of values changed: regenerate as above"
    )


def _actions(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    return [
        (tuple(a.option_strings), a.dest, a.nargs == 0, a.type in (int, float) and a.type,
         tuple(a.choices or ()), a.const, a.default if not a.option_strings else None)
        for a in parser._actions
    ]  # fmt: skip


@recorded_torch
def test_the_parser_without_torch_is_torchs() -> None:
    recorded = parser_without_torch()
    assert recorded is not None
    full = run_parser()
    # the help action is torch's own, a switch in the recorded one (--help goes to torch's)
    assert _actions(recorded)[1:] == _actions(full)[1:]
    assert takes_value(recorded) == takes_value(full)
    assert list(takes_value(recorded)) == list(takes_value(full))  # an ambiguity lists alike


@recorded_torch
@pytest.mark.parametrize(
    "argv",
    [
        ["--hosts", "h1:2,h2:2", "train.py", "--lr", "1"],
        ["-H", "h1,h2", "--nnodes", "1:2", "--max-restarts=2", "-x", "A=1", "train.py"],
        ["--hostfile", "hf", "--standalone", "--rdzv-conf", "x=1", "-m", "pkg.mod", "--n", "5"],
        ["--hosts", "h1", "--no-python", "--", "-weird", "arg"],
        ["--hosts", "h1", "--unknown-thing", "3", "train.py"],
        ["--hosts", "h1", "--master-port"],
    ],
)
def test_the_split_without_torch_is_the_full_one(argv: list[str]) -> None:
    assert split_without_torch(argv) == split(argv)


@recorded_torch
def test_the_fan_out_launcher_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import sys; from distrain.launch import cli; "
        "cli.main(['--hosts', '127.0.0.1:1,127.0.0.2:1', '--dry-run', 'train.py']); "
        "print('torch imported' if 'torch' in sys.modules else 'no torch')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0 and res.stdout.strip().endswith("no torch"), res.stdout + res.stderr
    assert "[127.0.0.2] ssh -o BatchMode=yes" in res.stdout


def test_another_torch_falls_back_to_torchs_parser(tmp_path: Path) -> None:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('a stand-in')\n")
    (fake / "version.py").write_text("__version__ = '1.0.0'\ncuda = None\n")
    code = (
        "from distrain.launch.command_line import split_without_torch; "
        "print(split_without_torch(['--hosts', 'a', 'x.py']))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert res.stdout.strip() == "None", res.stdout + res.stderr
