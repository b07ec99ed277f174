"""A job that stays up until the test has inspected it: held_job.py DIR [--spawn N] [extra args].

Each rank writes DIR/ready<rank> (its pid) after init() and waits for DIR/release (at most
120 s), so a test can look at the live job's listening sockets and process titles.
"""

import os
import sys
import time

import distrain


def hold(out: str) -> None:
    ctx = distrain.init()
    with open(os.path.join(out, f"ready{ctx.rank}"), "w") as f:
        f.write(f"{os.getpid()} {os.environ.get('MASTER_PORT', '')}")
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(out, "release")) and time.monotonic() < deadline:
        time.sleep(0.2)
    ctx.barrier()


def spawned(rank: int, out: str) -> None:
    hold(out)


if __name__ == "__main__":
    if "--spawn" in sys.argv:
        distrain.spawn(spawned, int(sys.argv[sys.argv.index("--spawn") + 1]), args=(sys.argv[1],))
    else:
        hold(sys.argv[1])
