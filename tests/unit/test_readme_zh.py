"""README.zh-CN.md keeps up with README.md, section by section and command by command.

The Chinese page is written for readers of the Chinese DDP tutorials, not translated sentence by
sentence; but a reader of it must not miss a feature the English page has.  So:

- every ``##``/``###`` section of README.md has its counterpart in README.zh-CN.md, named in
  :data:`SECTIONS` (a new English section fails here until it is written in Chinese and mapped);
- every command of README.md (each line of a ``bash`` block, each ``$ `` line of any block)
  appears in README.zh-CN.md, its comment aside (comments are translated);
- the Chinese page does not repeat a claim the English docs contradict (:data:`RETRACTED`).

tests/unit/test_docs_commands.py checks that the commands themselves parse.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EN = REPO / "README.md"
ZH = REPO / "README.zh-CN.md"

#: README.md section → its README.zh-CN.md counterpart (the heading text, without the #s)
SECTIONS = {
    "Five changed lines": "只改五处：单卡脚本变分布式",
    "Any launcher, no edits": "任意启动器，无需改代码",
    "The Context": "Context 一览",
    "Bigger than one device: sharded training": "一张卡放不下：FSDP 分片训练",
    "`distrain run`": "选择设备和进程数",
    "Rehearse on CPU": "在 CPU 上演练（`--cpu`）",
    "Survive failures: checkpoints and exact resume": "挂了也不怕：检查点和精确续训",
    "Train through failures: `--replicas` (TorchFT)": "带着故障继续训练：`--replicas`（TorchFT）",
    "Many machines": "多机多卡",
    "What is wrong with my machine? `distrain doctor`": "机器哪里有问题？`distrain doctor`",
    "Is it faster? `distrain bench scaling`": "真的更快吗？`distrain bench scaling` / `bench comm`",
    "Watch a job: `distrain top`, TensorBoard": "观察任务：`distrain top`、TensorBoard",
    "Containers and clusters: `distrain export`": "容器和集群：`distrain export`",
    "Faster start and restart, less gradient traffic": "更快的启动与重启、更少的梯度通信",
    "distrain's messages": "distrain 的输出：说发生了什么，不多说",
    "Module map": "开发者：模块、测试和基准",
    "Tests": "开发者：模块、测试和基准",
    "Benchmarks": "开发者：模块、测试和基准",
}

#: claims the Chinese page once made that the English docs contradict: (pattern, why it is wrong)
RETRACTED = [
    (r"检查点目录必须是各节点共享的",
     "docs/checkpointing.md, 'Per-node disks': DDP jobs keep a complete checkpoint on "
     "each node's own disk"),
]  # fmt: skip


def headings(page: Path) -> list[str]:
    """The ``##`` and ``###`` headings of `page`, outside code blocks."""
    found, in_code = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{2,3} ", line):
            found.append(line.lstrip("#").strip())
    return found


def commands(page: Path) -> list[str]:
    """The page's commands: each line of a ``bash`` block, each ``$ `` line of any block; without
    their comment and with runs of spaces made one."""
    found, lang = [], None
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            lang = None if lang is not None else line.strip()[3:] or "text"
            continue
        prompt = re.match(r"^\s*\$\s+(.*)", line)
        if lang is None or not (prompt or lang == "bash"):
            continue
        text = (prompt.group(1) if prompt else line).split(" #")[0].strip()
        if text and not text.startswith("#"):
            found.append(" ".join(text.split()))
    return found


def test_every_english_section_has_its_chinese_counterpart() -> None:
    english, chinese = headings(EN), set(headings(ZH))
    unmapped = [h for h in english if h not in SECTIONS]
    assert not unmapped, f"README.md sections with no Chinese counterpart in SECTIONS: {unmapped}"
    missing = sorted({SECTIONS[h] for h in english} - chinese)
    assert not missing, f"README.zh-CN.md lacks these sections: {missing}"
    stale = sorted(h for h in SECTIONS if h not in english)
    assert not stale, f"SECTIONS maps English sections that no longer exist: {stale}"


def test_every_english_command_is_in_the_chinese_page() -> None:
    english = commands(EN)
    assert len(english) >= 25, english  # the reader finds them: the blocks are recognised
    chinese = set(commands(ZH))
    missing = [c for c in english if c not in chinese]
    assert not missing, "README.md commands missing from README.zh-CN.md:\n" + "\n".join(missing)


def test_no_retracted_claim() -> None:
    for page in (ZH, REPO / "docs" / "zh" / "faq.md"):
        text = page.read_text(encoding="utf-8")
        found = [why for pattern, why in RETRACTED if re.search(pattern, text)]
        assert not found, (page.name, found)


def test_the_chinese_page_names_what_the_first_hour_needs() -> None:
    """The features a reader of the tutorials meets first, each named in the Chinese page."""
    text = ZH.read_text(encoding="utf-8")
    for needed in ("--replicas", "--start-method spawn", "--watchdog", "DISTRAIN_LOG_LEVEL=debug",
                   "DISTRAIN_PROGRESS", "distrain watchdog: no training progress",
                   "rerun the same command to resume from step"):  # fmt: skip
        assert needed in text, needed
