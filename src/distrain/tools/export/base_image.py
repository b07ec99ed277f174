"""The Dockerfile's base image: the official PyTorch image of the torch installed here.

A job's machines must run one torch (`distrain run --hosts` refuses a mismatch), so the image
follows this machine's: ``pytorch/pytorch:<torch>-cuda<CUDA>-cudnn<major>-runtime``, the torch
version and CUDA read from torch/version.py and cuDNN's major from the torch package's own
requirement (``nvidia-cudnn-cu13==9.…``), without ``import torch``.  A named
``pytorch/pytorch:`` image of another torch is refused in one line; an image of another name is
taken as given.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re

from distrain.errors import UsageError
from distrain.launch.options.torch_version import torch_versions

REPOSITORY = "pytorch/pytorch"


def for_installed_torch() -> str:
    """The official image of the torch installed here; UsageError when there is none to name."""
    version, cuda = torch_versions()
    if version is None:
        raise UsageError("torch is not installed here: give --base-image IMAGE (with torch in it)")
    release = version.split("+")[0]
    if not cuda:
        raise UsageError(
            f"this machine's torch {version} is a CPU build, and {REPOSITORY}'s images are CUDA "
            f"builds: give --base-image IMAGE with torch {release}"
        )
    return f"{REPOSITORY}:{release}-cuda{cuda}-cudnn{_cudnn_major()}-runtime"


def _cudnn_major() -> str:
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        requires = []
    for line in requires:
        found = re.match(r"nvidia-cudnn-cu\d+\s*==\s*(\d+)", line)
        if found:
            return found.group(1)
    return "9"  # every pytorch/pytorch runtime image since torch 2.3


def check(image: str) -> None:
    """UsageError when `image` is a pytorch/pytorch image of another torch than this one."""
    version, _ = torch_versions()
    found = re.match(rf"^(?:docker\.io/)?{REPOSITORY}:(\d+\.\d+\.\d+)", image)
    if found is None or version is None or found.group(1) == version.split("+")[0]:
        return
    raise UsageError(
        f"--base-image {image} holds torch {found.group(1)} but this machine runs "
        f"{version.split('+')[0]} (distrain run --hosts refuses a mismatch): leave --base-image "
        "out for this torch's image, or give one with the same torch"
    )
