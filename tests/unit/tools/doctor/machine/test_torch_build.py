"""tools/doctor/machine/torch_build.py: cuDNN's integer version as text (both numbering schemes)."""

from __future__ import annotations

import pytest

from distrain.tools.doctor.machine.torch_build import _cudnn_text


@pytest.mark.parametrize(
    ("raw", "text"),
    [(8902, "8.9.2"), (90100, "9.1.0"), (92400, "9.24.0"), (7605, "7.6.5"), (None, None)],
)
def test_cudnn_text(raw: int | None, text: str | None) -> None:
    assert _cudnn_text(raw) == text
