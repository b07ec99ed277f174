"""Stand-in CUDA streams and events: no-ops on the CPU, where work is already ordered."""

from __future__ import annotations

import time
from typing import Any

import torch

from distrain.worker.rehearse.fake_state import _index


class Stream:
    """A no-op stream: work on the CPU is already ordered."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cuda", _index(device))
        self.priority = priority

    def wait_event(self, event: Any) -> None:  # noqa: D102
        pass

    def wait_stream(self, stream: Any) -> None:  # noqa: D102
        pass

    def record_event(self, event: Any = None) -> Event:  # noqa: D102
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:  # noqa: D102
        return True

    def is_capturing(self) -> bool:  # noqa: D102 - no CUDA graph is ever captured
        return False

    def synchronize(self) -> None:  # noqa: D102
        pass

    @property
    def device_index(self) -> int:  # noqa: D102
        return self.device.index or 0

    device_type = "cuda"
    stream_id = 0
    cuda_stream = 0

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return 0


class Event:
    """An event that records wall time, so elapsed_time() measures the CPU's work."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> None:
        self.time: float | None = None

    def record(self, stream: Any = None) -> None:  # noqa: D102
        self.time = time.perf_counter()

    def wait(self, stream: Any = None) -> None:  # noqa: D102
        pass

    def query(self) -> bool:  # noqa: D102
        return True

    def synchronize(self) -> None:  # noqa: D102
        pass

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between the two records."""
        if self.time is None or end_event.time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.time - self.time) * 1000.0


_DEFAULT_STREAM = Stream.__new__(Stream)
_DEFAULT_STREAM.device, _DEFAULT_STREAM.priority = torch.device("cuda", 0), 0


def current_stream(device: Any = None) -> Stream:
    """The (single, no-op) stream."""
    return _DEFAULT_STREAM


def stream(stream: Any) -> Any:
    """``with torch.cuda.stream(s):``: a no-op context."""
    return stream if isinstance(stream, Stream) else _DEFAULT_STREAM
