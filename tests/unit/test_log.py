"""log.py: distrain's worker-side messages go through the ``distrain`` logger, one line each on
the current stderr, and a script can silence or redirect them."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from distrain.checkpoint.files import _warn
from distrain.log import get_logger


@pytest.fixture(autouse=True)
def _restore_logger() -> object:
    root = logging.getLogger("distrain")
    saved = (list(root.handlers), root.level, root.propagate, root.disabled)
    yield
    root.handlers[:], root.level, root.propagate, root.disabled = saved


def test_a_message_is_the_same_one_line_on_the_stderr_of_the_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    get_logger("checkpoint")
    swapped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", swapped)  # a forked worker replaces sys.stderr after import
    _warn("skipping invalid checkpoint: x")
    assert swapped.getvalue() == "distrain: checkpoint: skipping invalid checkpoint: x\n"


def test_silenced_by_level_and_redirected_to_the_scripts_handlers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger("distrain")
    get_logger("checkpoint")
    root.setLevel(logging.ERROR)
    _warn("quiet please")
    assert capsys.readouterr().err == ""
    root.setLevel(logging.INFO)
    mine = io.StringIO()
    root.handlers.clear()
    root.addHandler(logging.StreamHandler(mine))
    _warn("to my handler")
    assert (
        mine.getvalue() == "distrain: checkpoint: to my handler\n" and capsys.readouterr().err == ""
    )


def test_loggers_are_children_of_distrain() -> None:
    assert get_logger("watchdog").name == "distrain.watchdog"
    assert get_logger("watchdog").parent is logging.getLogger("distrain")
