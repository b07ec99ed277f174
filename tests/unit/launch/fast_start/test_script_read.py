"""launch/fast_start/env_writes.py and torch_free.py: what the script's source decides about forking
it (the jobs that prove the decisions: tests/jobs/test_fidelity_probe.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distrain.launch.fast_start.env_writes import env_set_before_torch, read_at_import
from distrain.launch.fast_start.forkserver import choose_start
from distrain.launch.fast_start.torch_free import never_imports_torch


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('import os\nos.environ["TORCH_LOGS"] = "+dynamo"\nimport torch\n', ("TORCH_LOGS", 2)),
        ('import os\nos.environ.setdefault("OMP_NUM_THREADS", "1")\nimport torch\n',
         ("OMP_NUM_THREADS", 2)),
        ('from os import environ as e\ne["MKL_NUM_THREADS"] = "1"\nimport torch.nn\n',
         ("MKL_NUM_THREADS", 2)),
        ('import os\nos.putenv("PYTORCH_JIT", "0")\nfrom torch import nn\n', ("PYTORCH_JIT", 2)),
        ('import os\nos.environ.update(CUDA_VISIBLE_DEVICES="1")\nimport torch\n',
         ("CUDA_VISIBLE_DEVICES", 2)),
        ('import os\nk = "TORCH_LOGS"\nos.environ[k] = "x"\nimport torch\n',
         ("a variable it names at run time", 3)),
        ('import os\ndel os.environ["TORCH_LOGS"]\nimport torch\n', ("TORCH_LOGS", 2)),
        # the compile stack's variables count after `import torch` too: the server imported it
        ('import torch, os\nos.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"\n',
         ("TORCHINDUCTOR_MAX_AUTOTUNE", 2)),
        # no torch import in the file: every write counts (a module of its own may import it)
        ('import os, mylib\nos.environ["OMP_NUM_THREADS"] = "2"\n', ("OMP_NUM_THREADS", 2)),
    ],
)  # fmt: skip
def test_a_write_torch_reads_at_import_is_found(source: str, found: tuple[str, int]) -> None:
    assert env_set_before_torch(source) == found


@pytest.mark.parametrize(
    "source",
    [
        'import torch, os\nos.environ["OMP_NUM_THREADS"] = "1"\n',  # too late under torchrun too
        'import os\nos.environ["NCCL_DEBUG"] = "INFO"\nimport torch\n',  # read by the NCCL group
        'import os\nos.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"\nimport torch\n',
        'import os\nos.environ["MASTER_PORT"] = "29500"\nimport torch\n',
        'import os\nprint(os.environ["TORCH_LOGS"])\nimport torch\n',  # a read, not a write
        "def (:\n",
    ],
)
def test_what_torch_does_not_read_at_import_keeps_the_fork(source: str) -> None:
    assert env_set_before_torch(source) is None


def test_the_families_torch_reads_were_measured() -> None:
    for name in ("TORCH_LOGS", "TORCHDYNAMO_VERBOSE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"):
        assert read_at_import(name), name
    for name in ("NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "MASTER_ADDR", "HF_HOME"):
        assert not read_at_import(name), name


def _script(tmp_path: Path, source: str, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


@pytest.mark.parametrize(
    "source", ["import os, json, logging\n", "from collections import abc\nimport yaml\n"]
)
def test_a_script_of_stdlib_and_light_packages_is_torch_free(tmp_path: Path, source: str) -> None:
    assert never_imports_torch(_script(tmp_path, source))


@pytest.mark.parametrize(
    "source",
    [
        "import torch\n",
        "def main():\n    import torch.distributed\n",  # any depth
        "import importlib\nimportlib.import_module('json')\n",  # a door the read cannot follow
        "m = __import__('json')\n",
        "import pickle\n",  # may unpickle a tensor
        "from . import sibling\n",
        "import not_installed_anywhere_xyz\n",
        "import torchvision\n",  # a package that imports torch
        "import mymodel\n",  # the script's own module, which imports torch
        "import mypkg.sub\n",  # a package of its own, whose other module imports torch
    ],
)
def test_anything_that_may_import_torch_is_not_torch_free(tmp_path: Path, source: str) -> None:
    (tmp_path / "mymodel.py").write_text("import json\nfrom torch import nn\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "sub.py").write_text("import os\n")
    (tmp_path / "mypkg" / "other.py").write_text("import torch\n")
    assert not never_imports_torch(_script(tmp_path, source))


def test_the_scripts_own_torch_free_modules_are_read(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("import os\nimport yaml\n")
    assert never_imports_torch(_script(tmp_path, "import helpers\n"))


def _args(script: str) -> argparse.Namespace:
    return argparse.Namespace(
        start_method="fast", module=False, no_python=False, run_path=False, training_script=script
    )


def test_the_start_follows_the_read(tmp_path: Path) -> None:
    torch_script = _script(tmp_path, "import torch\n", "a.py")
    assert choose_start(_args(torch_script)).method == "forkserver"
    free = choose_start(_args(_script(tmp_path, "import json\n", "b.py")))
    assert (free.method, free.note) == ("spawn", "")  # nothing to say: the script sees no change
    env = choose_start(
        _args(_script(tmp_path, 'import os\nos.environ["TORCH_LOGS"]="+x"\n', "c.py"))
    )
    assert env.method == "spawn" and env.note == (
        "c.py sets TORCH_LOGS (line 2) before torch reads it at import, and the fork server "
        "imported torch already; starting workers in fresh interpreters"
    )
