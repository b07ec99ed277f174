"""A self-starting script whose children never end on their own: a loop of ``Process``.

    python process_sleepers.py OUT WORLD

Each child (spawn start method, no torch) touches OUT/stepped-<rank> and then sleeps in steps
of 0.1 s for good; the script joins them.  Nothing asks these children to die with their
parent: the launcher-death test (tests/jobs/test_selfstart_death.py) uses it.
"""

import multiprocessing as mp
import os
import sys
import time


def work(rank: int, out: str) -> None:
    """One child: say it runs, then never end."""
    open(os.path.join(out, f"stepped-{rank}"), "w").close()
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    out, world = sys.argv[1], int(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=work, args=(rank, out)) for rank in range(world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
