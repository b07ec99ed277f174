"""tools/export/install.py: --install never names an index package; auto builds from source."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrain import __version__
from distrain.errors import UsageError
from distrain.tools.export.install import distrain_source, resolve


@pytest.mark.parametrize(
    "spec", ["distrain", "distrain==0.1.0", "distrain[ft]>=0.1", "torch-distrain"]
)
def test_index_names_are_refused(tmp_path: Path, spec: str) -> None:
    with pytest.raises(UsageError, match="names a package on an index"):
        resolve(spec, tmp_path)


def test_auto_outside_distrains_tree_names_a_wheel_of_this_distrain(tmp_path: Path) -> None:
    assert distrain_source() is not None  # the tests run from a checkout
    install = resolve("auto", tmp_path, build=False)
    assert (install.kind, install.spec) == (
        "wheel",
        f"wheels/distrain-{__version__}-py3-none-any.whl",
    )


def test_auto_in_distrains_own_tree_installs_the_context() -> None:
    source = distrain_source()
    assert source is not None and resolve("auto", source).spec == "."


def test_wheels_paths_and_urls(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "distrain-9-py3-none-any.whl").write_bytes(b"")
    assert resolve("dist/distrain-9-py3-none-any.whl", tmp_path).kind == "wheel"
    with pytest.raises(UsageError, match="no such wheel"):
        resolve("dist/other.whl", tmp_path)
    with pytest.raises(UsageError, match="relative to the project directory"):
        resolve("/abs/distrain.whl", tmp_path)
    assert resolve(".[examples]", tmp_path).kind == "context"
    assert resolve("git+https://example.org/distrain.git", tmp_path).kind == "url"
    with pytest.raises(UsageError, match="expected auto"):
        resolve("-e x", tmp_path)
