"""docs/environment.md has a row for every DISTRAIN_* variable: the product's, and no other.

A name with the product's prefix in src/ must be documented; one in tests/, benchmarks/ or
examples/ must be a documented product variable too (test-only variables use ``DTEST_``).
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import REPO

DOC = REPO / "docs" / "environment.md"
#: a variable name, not part of a longer identifier such as _DISTRAIN_DIR
_NAME = re.compile(r"(?<![A-Za-z0-9_])DISTRAIN_[A-Z][A-Z0-9_]*")


def _names_in(folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for name in _NAME.findall(path.read_text(errors="replace")):
            found.setdefault(name.rstrip("_"), set()).add(str(path.relative_to(REPO)))
    return found


def documented() -> set[str]:
    """The names in the first column of the doc's table."""
    return {
        m.group(1) for m in re.finditer(r"^\| `(DISTRAIN_[A-Z0-9_]+)` \|", DOC.read_text(), re.M)
    }


def test_every_variable_in_src_has_a_row() -> None:
    missing = {
        name: sorted(files)
        for name, files in _names_in(REPO / "src" / "distrain").items()
        if name not in documented()
    }
    assert not missing, f"DISTRAIN_* names in src/ without a row in docs/environment.md: {missing}"


def test_tests_and_benchmarks_use_no_undocumented_product_names() -> None:
    found: dict[str, set[str]] = {}
    for folder in ("tests", "benchmarks", "examples"):
        for name, files in _names_in(REPO / folder).items():
            found.setdefault(name, set()).update(files)
    unknown = {name: sorted(files) for name, files in found.items() if name not in documented()}
    assert not unknown, (
        "not product variables (test-only ones are named DTEST_*, documented ones have "
        f"a row): {unknown}"
    )


def test_every_row_is_read_in_src() -> None:
    in_src = set(_names_in(REPO / "src" / "distrain"))
    stale = sorted(documented() - in_src)
    assert not stale, f"docs/environment.md rows for names src/ no longer has: {stale}"
