"""launch/self_start/detect.py: a script that starts its own workers is found however imported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrain.launch.self_start.detect import SelfStart, decide, find, mark


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


LOOP = "for rank in range(2):\n    p = {call}(target=f, args=(rank, 2))\n    p.start()\n"


@pytest.mark.parametrize(
    ("source", "found"),
    [("import torch.multiprocessing as mp\n\nmp.spawn(main, nprocs=2)\n",
      SelfStart("torch.multiprocessing.spawn", 3)),
     ("import torch.multiprocessing\ntorch.multiprocessing.start_processes(f)\n",
      SelfStart("torch.multiprocessing.start_processes", 2)),
     ("from torch.multiprocessing import spawn as go\ngo(f)\n",
      SelfStart("torch.multiprocessing.spawn", 2)),
     ("from torch import multiprocessing as tmp\nx = 1\ntmp.spawn(f, nprocs=4)\n",
      SelfStart("torch.multiprocessing.spawn", 3)),
     ("import multiprocessing as mp\n" + LOOP.format(call="mp.Process"),
      SelfStart("multiprocessing.Process", 3)),
     ("import torch.multiprocessing as mp\n" + LOOP.format(call="mp.Process"),
      SelfStart("torch.multiprocessing.Process", 3)),
     ("from multiprocessing import Process as P\n" + LOOP.format(call="P"),
      SelfStart("multiprocessing.Process", 3)),
     ("import multiprocessing\nctx = multiprocessing.get_context('spawn')\n"
      + LOOP.format(call="ctx.Process"),
      SelfStart("multiprocessing.Process", 4)),
     ("import multiprocessing as mp\nps = [mp.get_context('fork').Process(target=f) for "
      "_ in range(2)]\n",
      SelfStart("multiprocessing.Process", 2)),
     ("import multiprocessing as mp\nwith mp.Pool(2) as pool:\n    pool.map(f, range(2))\n",
      SelfStart("multiprocessing.Pool", 2)),
     ("import multiprocessing as mp\np = mp.Process(target=serve)\np.start()\n",
      None),  # one helper: no group
     ("def spawn(): pass\nspawn()\n", None),
     ("class Process: pass\nfor i in range(2):\n    Process()\n", None),
     ("this is not python(\n", None)],
)  # fmt: skip
def test_find(tmp_path: Path, source: str, found: SelfStart | None) -> None:
    assert find(_script(tmp_path, source)) == found


def test_find_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert find(str(tmp_path / "nope.py")) is None


def test_start_line_says_what_was_seen() -> None:
    line = SelfStart("multiprocessing.Process", 40).start_line("distrain run", "train.py", 2)
    assert line == (
        "distrain run: train.py starts its own workers (multiprocessing.Process at line 40); "
        "running it once (not 2 copies), its children are the job"
    )


def test_mark_puts_the_boot_folder_on_pythonpath_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/mine")
    env: dict[str, str] = {}
    mark(env)
    mark(env)
    boot, rest = env["PYTHONPATH"].split(os.pathsep)
    assert env["DISTRAIN_SELF_STARTING"] == "1" and boot.endswith("boot") and rest == "/mine"


_IMAGENET = (
    "import torch.multiprocessing as mp\n"
    "def main(args):\n"
    "    if args.multiprocessing_distributed:\n"
    "        mp.spawn(worker, nprocs=2)\n"
    "    else:\n"
    "        worker(0)\n"
    "if __name__ == '__main__':\n"
    "    main(parse())\n"
)


@pytest.mark.parametrize(
    ("source", "condition"),
    [(_IMAGENET, "args.multiprocessing_distributed"),
     ("import torch.multiprocessing as mp\nif __name__ == '__main__':\n    mp.spawn(f, nprocs=2)\n",
      ""),
     ("import torch.multiprocessing as mp\nif '__main__' == __name__:\n    mp.spawn(f, nprocs=2)\n",
      ""),
     ("import torch.multiprocessing as mp\nif __name__ == '__main__':\n    pass\nelse:\n    "
      "mp.spawn(f, nprocs=2)\n",
      "__name__ == '__main__'"),
     ("import torch.multiprocessing as mp\ntry:\n    x()\nexcept E:\n    mp.spawn(f, nprocs=2)\n",
      "an exception was raised"),
     ("import torch.multiprocessing as mp\nn > 1 and mp.spawn(f, nprocs=n)\n",
      "n > 1 and mp.spawn(f, nprocs=n)")],
)  # fmt: skip
def test_a_starter_under_a_condition_is_not_sure(
    tmp_path: Path, source: str, condition: str
) -> None:
    found = find(_script(tmp_path, source))
    assert found is not None and found.condition == condition and found.sure == (not condition)


def test_an_unconditional_starter_wins_over_a_conditional_one(tmp_path: Path) -> None:
    source = "import torch.multiprocessing as mp\nif a:\n    mp.spawn(f)\nmp.spawn(g)\n"
    assert find(_script(tmp_path, source)) == SelfStart("torch.multiprocessing.spawn", 4)


def test_decide_runs_a_flag_gated_script_as_torchrun_would_and_says_so(tmp_path: Path) -> None:
    script = _script(tmp_path, _IMAGENET)
    found, note = decide(script, None)
    assert found is None
    assert note == (
        "train.py starts its own workers only if args.multiprocessing_distributed "
        "(torch.multiprocessing.spawn at line 4): running it as torchrun would; "
        "pass --self-starting if it starts them in this run"
    )
    assert decide(script, True) == (
        SelfStart("torch.multiprocessing.spawn", 4, "args.multiprocessing_distributed"),
        "",
    )
    sure = _script(tmp_path, "import torch.multiprocessing as mp\nmp.spawn(f)\n")
    assert decide(sure, None) == (SelfStart("torch.multiprocessing.spawn", 2), "")
    assert decide(sure, False) == (None, "")
    plain = _script(tmp_path, "print(1)\n")
    assert decide(plain, True) == (SelfStart("--self-starting", 0), "")


@pytest.mark.parametrize("nnodes", ["2", "1:2", "2:3"])
def test_a_self_starting_script_on_more_than_one_node_is_refused_in_one_line(nnodes: str) -> None:
    from distrain.errors import UsageError
    from distrain.launch.self_start.detect import refuse_nodes

    with pytest.raises(UsageError) as info:
        refuse_nodes(SelfStart("torch.multiprocessing.spawn", 45), "train.py", nnodes)
    text = str(info.value)
    assert "\n" not in text and text.startswith("train.py starts its own workers (torch.")
    assert f"with --nnodes {nnodes} every node would start a job of its own" in text
    refuse_nodes(SelfStart("torch.multiprocessing.spawn", 45), "train.py", "1")  # one node: fine
