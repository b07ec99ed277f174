"""What init() sets up before the Context: the process's start, and the worker's one seam.

The restart-safe store with a restarted attempt's bounded wait for its peers (:mod:`.store`),
the attempt every rank agrees on (:mod:`.attempt`), NCCL's debugging aids (:mod:`.nccl_debug`),
the process title (:mod:`.title`).

The seam, here: the core (worker/init.py, worker/context.py, the checkpointer) names no
feature.  What a feature changes while the script trains goes through the Context's training
layer (worker/layer.py); what it changes in `init()` is asked here, from :class:`Settings` (the
environment the feature's launcher side set), without importing the feature: a plain job imports
none of their modules (nor one more module for the seam: this package is loaded anyway).  It is
the worker's counterpart of launch/seam.py's ``FEATURES`` and, like it, the one place that names
each feature:

- the replica groups (``--replicas``, worker/replicas/): the group in the process title, and
  the training layer with TorchFT's manager (worker/replicas/layer.py :func:`make_layer`);
- the rehearsal (``--cpu``, worker/rehearse/): the devices are stand-ins with no NVML behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrain.process.info import ProcessInfo
    from distrain.settings import Settings
    from distrain.worker.layer import Layer


def title_group(settings: Settings) -> int | None:
    """The group the process title names (None: the job's ranks are one group)."""
    return settings.replica_group


def devices_are_stand_ins(settings: Settings) -> bool:
    """Whether this process's CUDA devices stand in for GPUs it does not have."""
    return settings.cpu_rehearsal is not None


def training_layer(process: ProcessInfo, settings: Settings, precision: str) -> Layer | None:
    """The training layer a feature puts in place for this process (None: the plain one)."""
    if settings.replica_group is None:
        return None
    from distrain.worker.replicas.layer import make_layer

    return make_layer(process, settings, precision)
