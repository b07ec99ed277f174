"""Write docs/compatibility.md's modes × idioms table from the tests that prove its cells.

    python3 scripts/compat_table.py                 # run the marked tests, then write the table
    python3 scripts/compat_table.py --from FILE     # write it from an earlier run's results

Every test marked ``compat(mode, idiom, ...)`` (tests/helpers/compat.py) proves one cell.  The
run sets COMPAT_RESULTS, so each marked test appends its result; a cell shows its promised outcome
only when every test proving it passed, "FAILED" (with the test) otherwise, and "untested" when
no test proves it.  The script exits 1 when a cell failed or is untested.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "compatibility.md"
BEGIN, END = "<!-- compat-table:begin -->", "<!-- compat-table:end -->"
sys.path.insert(0, str(REPO / "tests"))
from helpers.compat import IDIOMS, MODES  # noqa: E402


def run_marked_tests(results: Path) -> int:
    """Run every compat-marked test with COMPAT_RESULTS=`results`; pytest's exit code."""
    env = dict(os.environ, COMPAT_RESULTS=str(results))
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "3", "-m", "compat", "tests/jobs"]
    return subprocess.run(cmd, cwd=REPO, env=env, check=False).returncode


def cells(results: Path) -> dict[tuple[str, str], dict[str, object]]:
    """(mode, idiom) → outcome, why, the tests and whether all of them passed."""
    table: dict[tuple[str, str], dict[str, object]] = {}
    for line in results.read_text().splitlines():
        r = json.loads(line)
        cell = table.setdefault(
            (r["mode"], r["idiom"]),
            {"outcome": r["outcome"], "why": r["why"], "tests": [], "ok": True},
        )
        name = r["test"].split("::", 1)[1]
        if name not in cell["tests"]:  # type: ignore[operator]
            cell["tests"].append(name)  # type: ignore[union-attr]
        cell["ok"] = bool(cell["ok"]) and r["result"] == "passed"
    return table


def render(table: dict[tuple[str, str], dict[str, object]]) -> tuple[str, int]:
    """The Markdown table and its notes; and how many cells failed or are untested."""
    bad, notes = 0, []
    head = "| idiom (tests/scripts/idioms/) | " + " | ".join(MODES.values()) + " |"
    lines = [head, "|" + "---|" * (len(MODES) + 1)]
    for idiom, (label, script) in IDIOMS.items():
        row = [f"{label} (`{script}`)"]
        for mode in MODES:
            cell = table.get((mode, idiom))
            if cell is None:
                row.append("untested")
                bad += 1
            elif not cell["ok"]:
                row.append(f"**FAILED** ({', '.join(cell['tests'])})")  # type: ignore[arg-type]
                bad += 1
            elif cell["outcome"] == "works":
                row.append("works")
            else:
                note = f"{cell['outcome']}: {cell['why']}"
                if note not in notes:  # one footnote per reason
                    notes.append(note)
                row.append(f"{cell['outcome']} [{notes.index(note) + 1}]")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"[{i}] {note}  " for i, note in enumerate(notes, 1)]
    lines.append("")
    lines.append("The tests behind each cell:")
    lines.append("")
    for (mode, idiom), cell in sorted(table.items()):
        tests: list[str] = cell["tests"]  # type: ignore[assignment]
        lines.append(f"- {mode} × {idiom}: `{'`, `'.join(tests)}`")
    return "\n".join(lines), bad


def write(table_md: str) -> None:
    """Replace the text between the markers in docs/compatibility.md."""
    text = DOC.read_text()
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(f"{before}{BEGIN}\n{table_md}\n{END}{after}")


def main() -> int:
    """Run (or read) the results, write the table, exit 1 on a failed or untested cell."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="source", type=Path, help="results of an earlier run")
    args = p.parse_args()
    if args.source is None:
        with tempfile.TemporaryDirectory() as tmp:
            results = Path(tmp) / "compat.jsonl"
            run_marked_tests(results)
            table = cells(results)
    else:
        table = cells(args.source)
    table_md, bad = render(table)
    write(table_md)
    print(f"{DOC.relative_to(REPO)}: {len(table)} cells proven, {bad} failed or untested")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
