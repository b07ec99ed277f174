"""docs/compatibility.md's modes × idioms table is whole and names tests that exist."""

from __future__ import annotations

import re

from helpers.compat import IDIOMS, MODES
from helpers.paths import REPO, TESTS

DOC = REPO / "docs" / "compatibility.md"


def _table() -> str:
    text = DOC.read_text()
    return text.split("<!-- compat-table:begin -->", 1)[1].split("<!-- compat-table:end -->")[0]


def test_every_cell_is_proven_and_none_failed() -> None:
    """One row per idiom, one column per mode, no cell untested or failed."""
    rows = [line for line in _table().splitlines() if line.startswith("| ")][1:]
    assert len(rows) == len(IDIOMS)
    for row, (label, script) in zip(rows, IDIOMS.values(), strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == f"{label} (`{script}`)"
        assert len(cells) == len(MODES) + 1, row
        for cell in cells[1:]:
            assert re.fullmatch(r"works|refused \[\d+\]|n/a \[\d+\]", cell), (row, cell)


def test_every_named_test_exists() -> None:
    """Each test the table names is defined in tests/jobs/ (a renamed test regenerates it)."""
    sources = "\n".join(p.read_text() for p in (TESTS / "jobs").glob("test_*.py"))
    named = re.findall(r"`(test_\w+)(?:\[[^\]]*\])?`", _table())
    assert named
    for name in set(named):
        assert f"def {name}(" in sources, name
