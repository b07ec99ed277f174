"""NCCL's own debugging aids switched on before the NCCL process group exists."""

from __future__ import annotations

import os

import torch


def nccl_debug_defaults(log_dir: str | None = None, user_trace_buffer: str | None = None) -> None:
    """Turn on PyTorch's NCCL flight recorder and async error handling (user values win).

    Must run before the NCCL process group is created.  On a collective timeout NCCL's watchdog
    aborts the communicator and dumps the last collectives of every rank to
    ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`` (read them with torch's ``torchfrtrace``).
    `user_trace_buffer`: the user's TORCH_NCCL_TRACE_BUFFER_SIZE (distrain.settings), kept.
    """
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    # the flight recorder's buffer: torch 2.11 warns on every rank that TORCH_NCCL_TRACE_BUFFER_SIZE
    # is deprecated in favour of TORCH_FR_BUFFER_SIZE (seen on an H100); older torch documents
    # only the NCCL name, so keep it there
    if user_trace_buffer is None:
        old_torch = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 11)
        os.environ.setdefault(
            "TORCH_NCCL_TRACE_BUFFER_SIZE" if old_torch else "TORCH_FR_BUFFER_SIZE", "2000"
        )
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    if log_dir:
        os.environ.setdefault(
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", os.path.join(log_dir, "nccl_trace_rank_")
        )
