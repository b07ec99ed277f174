"""An option name that is not in the table: the option it abbreviates, or the one meant.

torchrun's parser is argparse with ``allow_abbrev``: ``--max-restart 3`` is ``--max-restarts 3``
there, and a prefix of two option strings (``--max``: ``--max-restarts``, ``--max_restarts``)
is an error.  `distrain run` splits its command line before any parser sees it
(launch/command_line.py), so it applies the same rule itself: :func:`expand`.  A name that
abbreviates nothing gets the nearest spelling for its error line (:func:`nearest`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def expand(name: str, names: Iterable[str]) -> tuple[str | None, tuple[str, ...]]:
    """(the one option string `name` abbreviates, ()) or (None, every option string it could
    abbreviate): argparse's rule, only long options (``--x``) abbreviate."""
    if not name.startswith("--") or len(name) < 3:
        return None, ()
    matches = tuple(option for option in names if option.startswith(name))
    if len(matches) == 1:
        return matches[0], ()
    return None, matches


def nearest(name: str, names: Iterable[str]) -> str | None:
    """The option string closest to `name` in spelling (``-`` and ``_`` alike, any case, the
    hyphen spelling preferred), or None when none is close."""
    spellings: dict[str, str] = {}
    for option in sorted(names, key=lambda n: "_" in n):  # hyphen spellings first
        spellings.setdefault(_bare(option), option)
    typed = _bare(name)
    found = difflib.get_close_matches(typed, list(spellings), n=1, cutoff=0.6)
    return spellings[found[0]] if found else None


def _bare(name: str) -> str:
    # the leading dashes left out: every option shares them, and they would make any two
    # short names look alike
    return name.lstrip("-").replace("_", "-").lower()
