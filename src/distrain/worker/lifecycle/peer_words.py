"""A peer's failure as seen by a survivor, in words: `rank 0 stopped: another rank failed (…)`.

gloo's and the store's errors start with the C++ source line that raised them
(``[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by
peer [10.200.45.2]:46738. This is typically caused by a remote worker crashing. Check the logs
of the remote …``): the survivor's line was that text cut at 200 characters.  What it means fits
in a few words, with the peer's address: the root cause is the other rank's own line.
"""

from __future__ import annotations

import re

#: a known peer error's text → what it means ({peer}: the address in it, when there is one)
_MEANINGS = (
    ("Connection closed by peer", "its connection to {peer} closed: that process ended"),
    ("Connection reset by peer", "its connection to {peer} was reset: that process ended"),
    ("Broken pipe", "its connection to {peer} broke: that process ended"),
    ("Connection refused", "{peer} refused its connection: that process is gone"),
    ("Socket Timeout", "{peer} stopped answering (a socket timeout)"),
)
_SOURCE = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
_PEER = re.compile(r"\[?([0-9a-fA-F.:]+)\]?:\d+")
#: the longest a cause stays when no meaning is known (the message, without its source path)
LIMIT = 160


def peer_cause(err: BaseException) -> str:
    """``RuntimeError: its connection to 10.200.45.2 closed: that process ended`` for a known
    peer error; otherwise its first line without the C++ source path, cut at LIMIT."""
    first = (str(err).strip().splitlines() or [""])[0]
    text = _SOURCE.sub("", first)
    for known, meaning in _MEANINGS:
        if known in text:
            found = _PEER.search(text[text.index(known) :])
            peer = f"the process at {found.group(1)}" if found else "a peer"
            return f"{type(err).__name__}: {meaning.format(peer=peer)}"
    cut = text if len(text) <= LIMIT else text[: LIMIT - 1].rstrip() + "…"
    return f"{type(err).__name__}: {cut}" if cut else type(err).__name__
