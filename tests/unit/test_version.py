"""The version is written once, as distrain.__version__; pyproject.toml reads it from there."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import distrain

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_pyproject_takes_the_version_from_the_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "distrain.__version__"}


def test_the_installed_version_is_the_packages() -> None:
    assert importlib.metadata.version("distrain") == distrain.__version__
