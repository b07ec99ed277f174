"""Reports how it was started (for tests/jobs/test_fastboot.py); --exit CODE|none or --raise at the end."""

import json
import multiprocessing
import os
import sys

preloaded = "torch" in sys.modules  # True only in a worker forked from distrain's fork server
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

multiprocessing.set_start_method("spawn")  # works in a fresh interpreter, so must work forked too
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
info = {
    "preloaded": preloaded,
    "argv": sys.argv,
    "name": __name__,
    "path0": sys.path[0],
    "threads": torch.get_num_threads(),
    "sum": total.item(),
    "launcher": os.environ.get("DISTRAIN_LAUNCHER"),
    "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
}
print(f"hello from rank {dist.get_rank()}")
with open(os.path.join(os.environ["PROBE_OUT"], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(info, f)
dist.destroy_process_group()
if "--raise" in sys.argv:
    raise ValueError("boom from the probe")
if "--exit" in sys.argv:
    code = sys.argv[sys.argv.index("--exit") + 1]
    sys.exit(None if code == "none" else int(code))
