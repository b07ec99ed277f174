"""Reports how it was started (for tests/jobs/test_fastboot.py); --exit CODE|none or --raise."""

import json
import multiprocessing
import os
import sys

preloaded = "torch" in sys.modules  # True only in a worker forked from distrain's fork server
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# a guard: the script's own fork server below imports this file again as __mp_main__
if __name__ == "__main__":
    multiprocessing.set_start_method(
        "spawn"
    )  # works in a fresh interpreter, so must work forked too
    # a fork server of the script's own starts and serves, as in a fresh interpreter (distrain's
    # server was forked inside the stdlib's lock: a worker inheriting it locked would hang here)
    own = multiprocessing.get_context("forkserver").Process(target=os.getpid)
    own.start()
    own.join(60)
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().replace(b"\0", b" ").decode()
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
        "own_forkserver_exit": own.exitcode,
        "parent": parent,
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
