"""`distrain export`: a training script's Dockerfile, compose file, SLURM script and PyTorchJob.

Each target is one small module with a ``render(spec) -> str`` function; YAML is built as data
and dumped with PyYAML, never pasted together from strings.
"""

from __future__ import annotations

from distrain.tools.export.spec import DEFAULT_BASE_IMAGE, JobSpec

__all__ = ["DEFAULT_BASE_IMAGE", "JobSpec"]
