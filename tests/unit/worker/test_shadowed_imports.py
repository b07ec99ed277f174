"""forked.shadowed_imports: a module the fork server imported that the script's folder shadows."""

from __future__ import annotations

import types
from pathlib import Path

from distrain.worker.fast_start.forked import shadowed_imports


def _module(path: Path) -> types.ModuleType:
    module = types.ModuleType(path.parent.name)
    module.__file__ = str(path)
    return module


def test_a_local_package_shadowing_a_loaded_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "__init__.py").write_text("")
    installed = tmp_path / "site" / "yaml" / "__init__.py"
    why = shadowed_imports(str(tmp_path / "train.py"), {"yaml": _module(installed), "yaml.x": None})
    assert why.startswith("train.py would import its own yaml (") and why.endswith(
        f"the fork server has {installed}"
    )


def test_a_local_module_file_shadows_too(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("")
    why = shadowed_imports(
        str(tmp_path / "train.py"), {"helpers": _module(tmp_path / "x" / "helpers.py")}
    )
    assert "its own helpers" in why


def test_the_local_module_itself_a_namespace_folder_or_nothing_local_is_fine(
    tmp_path: Path,
) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()  # no __init__.py: a namespace portion, an installed data wins
    loaded = {
        "mine": _module(tmp_path / "mine" / "__init__.py"),
        "data": _module(tmp_path / "site" / "data" / "__init__.py"),
        "torch": _module(tmp_path / "site" / "torch" / "__init__.py"),
    }
    assert shadowed_imports(str(tmp_path / "train.py"), loaded) == ""
