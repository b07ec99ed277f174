"""worker/rehearse/refuse.py: what needs a real GPU stops with one line per job, naming the line."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from distrain.worker.rehearse import refuse


def test_only_the_first_process_says_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_JOB_DIR", str(tmp_path))
    assert refuse._first_to_say() is True
    assert refuse._first_to_say() is False
    assert os.path.exists(tmp_path / "said-refused")


def test_without_a_folder_every_process_says_it() -> None:
    assert refuse._first_to_say() is True
    assert refuse._first_to_say() is True


def test_refuse_prints_the_call_and_the_users_line_then_exits_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        refuse.refuse("torch.cuda.graph() (CUDA graphs)")
    assert info.value.code == refuse.REFUSED_EXIT_CODE == 3
    err = capsys.readouterr().err
    assert err.startswith(
        "distrain run --cpu: cannot rehearse torch.cuda.graph() (CUDA graphs) at "
    )
    assert "test_refuse.py:" in err and err.endswith(": it needs a real GPU\n")


def _extension_module() -> SimpleNamespace:
    calls: list[Any] = []
    module = SimpleNamespace(calls=calls, load=lambda *a,
                             **k: calls.append(("load", a, k)) or "built",
                             load_inline=lambda *a,
                             **k: calls.append(("load_inline", a, k)) or "built")  # fmt: skip
    refuse._cpp_extension(module)  # patches this stand-in module only
    return module


def test_cpu_extensions_still_build() -> None:
    module = _extension_module()
    assert module.load("ext", ["a.cpp"]) == "built"
    assert module.load_inline("ext", cpp_sources="int f();") == "built"
    assert [c[0] for c in module.calls] == ["load", "load_inline"]


@pytest.mark.parametrize(
    "call",
    [lambda m: m.load("ext", ["kernel.cu"]), lambda m: m.load("ext", sources="k.cuh"),
     lambda m: m.load_inline("ext", cuda_sources="__global__ void k();"),
     lambda m: m.load("ext", ["a.cpp"], with_cuda=True),
     lambda m: m.CUDAExtension("ext", ["a.cu"])],
)  # fmt: skip
def test_cuda_extensions_are_refused(call: Any, capsys: pytest.CaptureFixture[str]) -> None:
    module = _extension_module()
    with pytest.raises(SystemExit) as info:
        call(module)
    assert info.value.code == 3 and module.calls == []
    assert "torch.utils.cpp_extension." in capsys.readouterr().err
