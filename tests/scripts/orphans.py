"""Starts its own children without being read as self-starting, then one rank fails (issue 41).

Every rank but the last starts two ``Process`` children (under a condition, so `distrain run`
runs it as torchrun would: N copies, no watch) that write their pid to ``$DTEST_ORPHANS_OUT``
and sleep; the last rank raises once they all exist. The agent then stops the other ranks:
their children must die with the job, as torchrun's process-group kill ends them.
"""

import os
import sys
import time

import torch.multiprocessing as mp


def child(out: str) -> None:
    with open(os.path.join(out, f"child-{os.getpid()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)


if __name__ == "__main__":
    out = os.environ["DTEST_ORPHANS_OUT"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    expected = 2 * (world - 1)
    if "--children" in sys.argv and rank < world - 1:
        kids = [mp.Process(target=child, args=(out,)) for _ in range(2)]
        for kid in kids:
            kid.start()
        time.sleep(600)
    deadline = time.monotonic() + 120
    while len([n for n in os.listdir(out) if n.startswith("child-")]) < expected:
        if time.monotonic() > deadline:
            sys.exit("the children never started")
        time.sleep(0.1)
    raise ValueError("the script failed after its peers started their children")
