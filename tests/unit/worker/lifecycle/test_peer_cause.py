"""failure.peer_cause: a survivor's line names what its peer's loss means, not a C++ path."""

from __future__ import annotations

from distrain.worker.lifecycle.failure import LIMIT, peer_cause

#: gloo's text as a rank on another host saw it (torch 2.14.1, a peer's process ended)
GLOO = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by "
    "peer [10.200.45.2]:46738. This is typically caused by a remote worker crashing. Check the "
    "logs of the remote worker for the root cause."
)


def test_a_known_peer_error_in_words_with_the_peer() -> None:
    assert peer_cause(RuntimeError(GLOO)) == (
        "RuntimeError: its connection to the process at 10.200.45.2 closed: that process ended"
    )
    reset = RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection reset by peer")
    said = peer_cause(reset)
    assert said == "RuntimeError: its connection to a peer was reset: that process ended"


def test_another_error_loses_its_source_path_and_is_cut_whole() -> None:
    said = peer_cause(RuntimeError("[/x/y/store.cpp:12] " + "w" * 300))
    assert said.startswith("RuntimeError: www") and "store.cpp" not in said
    assert len(said) == len("RuntimeError: ") + LIMIT and said.endswith("…")
    assert peer_cause(RuntimeError("")) == "RuntimeError"
