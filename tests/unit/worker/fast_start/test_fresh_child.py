"""The cause kept from a fresh interpreter's stderr when it wrote no error file."""

from __future__ import annotations

import pytest

from distrain.worker.fast_start.fresh_child import last_exception_line

TRACEBACK = """Traceback (most recent call last):
  File "/job/train.py", line 3, in <module>
    raise RuntimeError("the licence server refused this host")
RuntimeError: the licence server refused this host
"""


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (TRACEBACK, "RuntimeError: the licence server refused this host"),
        (
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory\n",
            "torch.OutOfMemoryError: CUDA out of memory",
        ),
        ("ValueError: first\nsome log line\nKeyboardInterrupt\n", "KeyboardInterrupt"),
        (
            "  File 'x.py', line 1\nOSError: [Errno 28] No space left on device\nwarning: done\n",
            "OSError: [Errno 28] No space left on device",
        ),
    ],
)
def test_the_last_exception_line_is_found(text: str, line: str) -> None:
    assert last_exception_line(text) == line


@pytest.mark.parametrize(
    "text", ["", "loss 0.31\nstep 10\n", "  raise RuntimeError('x')\n", "Errors were found: 3\n"]
)
def test_text_without_an_exception_line_gives_none(text: str) -> None:
    assert last_exception_line(text) is None
