"""Run a call with a time bound in a daemon thread: a hung driver call must not hang the doctor."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ProbeTimeout(Exception):
    """The call did not return within its bound (it keeps running in a daemon thread)."""


def call_bounded(fn: Callable[[], T], timeout: float) -> T:
    """fn()'s result or exception; ProbeTimeout after `timeout` seconds.

    The thread is a daemon, so a call stuck inside a C library (a wedged NVIDIA driver, a DNS
    lookup) is abandoned rather than joined, and the process can still exit.
    """
    values: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            values.append(fn())
        except BaseException as err:  # handed to the caller below
            errors.append(err)

    thread = threading.Thread(target=target, daemon=True, name="doctor-probe")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ProbeTimeout(f"no answer within {timeout:g} s")
    if errors:
        raise errors[0]
    return values[0]
