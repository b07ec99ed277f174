"""Every `distrain run ...` command shown in the README and the docs (English and Chinese) uses only
launcher options `distrain run` accepts: a renamed or mistyped flag in a page fails here. The two
READMEs' tool commands (`doctor`, `bench`, `top`, `export`) parse with the tools' own parsers, and
the Chinese quick start opens with the English README's install and test commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from distrain.launch.command_line import split

REPO = Path(__file__).resolve().parents[2]
ZH_README = REPO / "README.zh-CN.md"
DOCS = [*sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "zh").glob("*.md"))]
PAGES = [REPO / "README.md", ZH_README, *DOCS]


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
    assert counts["README.zh-CN.md"] >= 5, counts


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_documented_launcher_option_exists(page: Path) -> None:
    bad = []
    for number, argv in documented_commands(page):
        try:
            split(argv).refuse_unknown()  # --hosts & co. are options of the same parser
        except Exception as err:  # UsageError: the one-line message names the option
            bad.append(f"{page.name}:{number}: {err}")
    assert not bad, "\n".join(bad)


def test_a_mistyped_option_is_caught() -> None:
    with pytest.raises(Exception, match="--nporc"):
        split(["--nporc", "2", "train.py"]).refuse_unknown()


def shell_lines(page: Path) -> list[tuple[int, str]]:
    """(line, command) for the page's shell lines: inside ```bash blocks, or after a `$ ` prompt
    in any block (a plain block is program output)."""
    found, lang = [], None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            lang = None if lang is not None else line.strip()[3:] or "text"
            continue
        prompt = re.match(r"^\s*\$\s+(.*)", line)
        if lang is not None and (prompt or lang in ("bash", "sh", "shell")):
            found.append((number, prompt.group(1) if prompt else line))
    return found


def tool_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line, argv after `distrain`) for the tool commands (not `run`) in the page's shell lines."""
    found = []
    for number, text in shell_lines(page):
        match = re.match(r"\s*(?:\S+=\S+\s+)*distrain\s+(?!run\b)(\S.*)", text)
        if match:
            command = match.group(1).split(" #")[0].split("&&")[0].split("|")[0]
            found.append((number, shlex.split(command)))
    return found


def _tool_parser(argv: list[str]) -> tuple[object, list[str]]:
    """The argparse parser of the tool `argv` names, and the arguments it parses (before `--`)."""
    from distrain.tools.bench import comm
    from distrain.tools.bench.study import scaling
    from distrain.tools.doctor import cli as doctor
    from distrain.tools.export import cli as export
    from distrain.tools.top import cli as top

    tools = {"doctor": doctor._parser, "top": top._parser, "export": export._parser,
             "bench comm": comm._parser, "bench scaling": scaling._parser}  # fmt: skip
    name = " ".join(argv[:2]) if argv[0] == "bench" else argv[0]
    if name not in tools:
        raise ValueError(f"no such command: distrain {name}")
    rest = argv[2:] if argv[0] == "bench" else argv[1:]
    return tools[name](), rest[: rest.index("--")] if "--" in rest else rest


@pytest.mark.parametrize("page", [REPO / "README.md", ZH_README], ids=lambda p: p.name)
def test_every_tool_command_parses(page: Path) -> None:
    commands = tool_commands(page)
    shown = {" ".join(argv[:2]) if argv[0] == "bench" else argv[0] for _, argv in commands}
    if page == ZH_README:  # the quick start's list: doctor, bench scaling, top, export
        assert {"doctor", "bench scaling", "top", "export"} <= shown, shown
    bad = []
    for number, argv in commands:
        try:
            parser, own = _tool_parser(argv)
            parser.parse_args(own)  # type: ignore[attr-defined]
        except (Exception, SystemExit) as err:  # UsageError, or argparse's exit
            bad.append(f"{page.name}:{number}: distrain {' '.join(argv)}: {err}")
    assert not bad, "\n".join(bad)


def test_a_mistyped_tool_option_is_caught() -> None:
    parser, own = _tool_parser(["top", "runs/x", "--onse"])
    with pytest.raises((Exception, SystemExit)):
        parser.parse_args(own)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="no such command: distrain bench scale"):
        _tool_parser(["bench", "scale"])


def _first_bash_block(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_chinese_quick_start_opens_with_the_readme_commands() -> None:
    """The install-and-run and test commands are the README's, word for word and in its order."""
    english = _first_bash_block(REPO / "README.md")
    assert len(english) == 2 and "pip install" in english[0] and "pytest" in english[1], english
    assert _first_bash_block(ZH_README) == english


def test_the_readme_links_the_chinese_quick_start_under_its_title() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# distrain"
    assert "](README.zh-CN.md)" in next(line for line in lines[1:] if line.strip())
