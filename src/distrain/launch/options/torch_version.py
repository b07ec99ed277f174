"""The installed torch's version and CUDA, read from torch/version.py without importing torch.

``import torch`` takes seconds on a loaded machine; the fan-out's host check and its launcher's
command-line split only need the version string.
"""

from __future__ import annotations

import importlib.util
import os
import re


def torch_versions() -> tuple[str | None, str | None]:
    """torch's version and the CUDA it was built for (None, None when torch is not installed)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None, None
    try:
        with open(
            os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8"
        ) as handle:
            text = handle.read()
    except OSError:
        return None, None
    version = re.search(r"^__version__\s*=\s*'([^']*)'", text, re.M)
    cuda = re.search(r"^cuda(?::[^=]*)?=\s*'([^']*)'", text, re.M)
    return (version.group(1) if version else None), (cuda.group(1) if cuda else None)
