"""What a training script sees of its launcher: written by every rank as JSON, to compare launchers.

Run beside its own ``yaml/`` package (PyYAML is installed too).  Each rank forms a gloo group
(so torch installs its exception hook, as in any real script) and writes
``$DTEST_PROBE_DIR/rank<R>.json`` (probe_record.py): ranks, argv, sys.path, cwd, ``__file__``, the
file of every imported top-level package, the environment, the start method, signal
dispositions and mask, faulthandler and sys.excepthook.  tests/jobs/test_fidelity_probe.py
compares torchrun's record with `distrain run`'s.
"""

import torch.distributed as dist
import yaml  # noqa: F401 - the local one: its marker is recorded
from probe_record import record, write

dist.init_process_group("gloo")
write(record(dist.get_rank(), dist.get_world_size(), __file__))
dist.barrier()
dist.destroy_process_group()
