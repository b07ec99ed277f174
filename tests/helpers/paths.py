"""Where things are: the checkout, its sources and examples, and the tests' own folders."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
SRC = REPO / "src"
EXAMPLES = REPO / "examples"
#: the job scripts the tests launch (tests/scripts/)
SCRIPTS = TESTS / "scripts"
