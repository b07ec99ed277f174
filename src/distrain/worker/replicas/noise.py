"""The C++ lines of a ``--replicas`` worker that no Python filter can reach (see distrain/noise.py).

torch's C++ warnings raised outside a Python call that translates them (c10d's bindings, the
autograd engine) are written by c10's default handler straight to file descriptor 2.  Two are
known noise in every replica group: TorchFT calls ``_set_sequence_number_for_group()`` (a
deprecated no-op in torch 2.14) at each reconfiguration of its process groups, and DDP with
``find_unused_parameters=True`` warns on its first forward that nothing was unused.

- the deprecated no-op is replaced by a Python no-op (through the patching registry), so nothing
  is warned;
- the first forward of a replica DDP model runs with fd 2 into a temporary file, whose lines are
  written back afterwards, less :data:`distrain.noise.KNOWN_CPP`.  Only that one forward: a line
  written there reaches the console a few milliseconds late, none is dropped unless it is known.

``DISTRAIN_LOG_LEVEL=debug``: neither is done.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from torch import nn

from distrain import noise
from distrain.process import patching


def _no_sequence_number(self: Any) -> None:
    """torch 2.14's own behaviour ("now a no-op"), without its warning."""


def quiet_sequence_numbers() -> None:
    """Replace the deprecated ``Backend._set_sequence_number_for_group`` by a silent no-op."""
    if noise.verbose():
        return
    from torch._C._distributed_c10d import Backend

    # once per process: the registry ignores the second install (each Replicas calls this)
    patching.replace(
        Backend, "_set_sequence_number_for_group", _no_sequence_number, feature="replicas"
    )


def known_line(line: bytes) -> bool:
    """Whether a line written to fd 2 is one of :data:`distrain.noise.KNOWN_CPP`."""
    text = line.decode(errors="replace")
    return any(k in text for k in noise.KNOWN_CPP)


@contextlib.contextmanager
def stderr_filtered() -> Iterator[None]:
    """fd 2 into a temporary file for the block; its lines back on fd 2 after, less the known."""
    if noise.verbose():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().splitlines(keepends=True) if not known_line(ln)]
            if kept:
                os.write(2, b"".join(kept))


def first_forward_filtered(model: nn.Module) -> None:
    """Run `model`'s first forward (DDP's reducer set-up) under :func:`stderr_filtered`."""
    state: dict[str, Any] = {}

    def begin(_module: nn.Module, _args: Any) -> None:
        if "window" not in state:
            state["window"] = stderr_filtered()
            state["window"].__enter__()

    def end(_module: nn.Module, _args: Any, _output: Any) -> None:
        window = state.get("window")
        if window is not None and not state.get("done"):
            state["done"] = True
            window.__exit__(None, None, None)
            pre.remove()
            post.remove()

    pre = model.register_forward_pre_hook(begin)
    post = model.register_forward_hook(end, always_call=True)  # also when the forward raises
