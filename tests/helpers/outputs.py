"""Reading what the jobs print."""

from __future__ import annotations

import re


def digits_accuracy(stdout: str) -> float:
    """The final test accuracy examples/train_digits.py prints ("done: test acc 0.9805 ...")."""
    found = re.findall(r"done: test acc ([0-9.]+)", stdout)
    assert found, f"no 'done: test acc' line in the output:\n{stdout[-2000:]}"
    return float(found[-1])
