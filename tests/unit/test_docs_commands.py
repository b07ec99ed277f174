"""Every `distrain run ...` command shown in the README and the docs (English and Chinese) uses only
launcher options `distrain run` accepts: a renamed or mistyped flag in a page fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from distrain.launch.plan import _option_table, _torchrun_parser, split_argv

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "zh").glob("*.md"))]


def documented_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line, argv after `distrain run`) for each command line inside the page's code blocks."""
    found, in_code = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        text = re.sub(r"^\s*\$\s*", "", line) if in_code else ""
        match = re.match(r"(?:\S+=\S+\s+)*distrain run\s+(.*)", text)
        if not match:
            continue
        command = match.group(1).split(" #")[0].split("&&")[0].split("|")[0]
        try:
            argv = shlex.split(command)
        except ValueError:  # an unbalanced quote in prose-like output: not a command
            continue
        if argv and not argv[0].endswith(":"):  # "distrain run --cpu: 2 CPU processes …" is output
            found.append((number, argv))
    return found


def test_the_pages_show_commands() -> None:
    counts = {p.name: len(documented_commands(p)) for p in PAGES}
    assert counts["README.md"] >= 5, counts
    assert sum(len(documented_commands(p)) for p in PAGES if p.parent.name == "zh") >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_documented_launcher_option_exists(page: Path) -> None:
    options = _option_table(_torchrun_parser())
    bad = []
    for number, argv in documented_commands(page):
        try:
            split_argv(argv, options)
        except Exception as err:  # UsageError: the one-line message names the option
            bad.append(f"{page.name}:{number}: {err}")
    assert not bad, "\n".join(bad)


def test_a_mistyped_option_is_caught() -> None:
    with pytest.raises(Exception, match="--nporc"):
        split_argv(["--nporc", "2", "train.py"], _option_table(_torchrun_parser()))
