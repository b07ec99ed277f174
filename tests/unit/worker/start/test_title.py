"""start/title.py: the process title text `distrain rank R/W · script args` (not set here)."""

from __future__ import annotations

from distrain.worker.start.title import MAX_TITLE, worker_title


def test_title_names_rank_world_and_the_script_command() -> None:
    assert (
        worker_title(1, 2, ["/home/u/train.py", "--epochs", "30"])
        == "distrain rank 1/2 · train.py --epochs 30"
    )


def test_title_quotes_arguments_and_handles_no_argv() -> None:
    assert worker_title(0, 1, ["t.py", "a b"]) == "distrain rank 0/1 · t.py 'a b'"
    assert worker_title("0", "4", []) == "distrain rank 0/4 · python"


def test_long_titles_are_cut_with_an_ellipsis() -> None:
    title = worker_title(3, 8, ["t.py", "x" * 500])
    assert len(title) == MAX_TITLE and title.endswith("…")
    assert title.startswith("distrain rank 3/8 · t.py xxx")


def test_replica_groups_title_names_the_group() -> None:
    """Under --replicas each group has a rank 0: the title tells them apart (prefix kept)."""
    title = worker_title(0, 1, ["t.py"], group=1)
    assert title == "distrain rank 0/1 · group 1 · t.py"
    assert worker_title(0, 1, ["t.py"], group=None) == "distrain rank 0/1 · t.py"
