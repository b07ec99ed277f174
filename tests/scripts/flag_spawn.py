"""Look-alike of pytorch/examples imagenet/main.py: mp.spawn only when a flag asks for it.

Under a launcher (``--dist-url env://``) every copy is a rank; with
``--multiprocessing-distributed`` the script starts its own workers.  Each rank prints
``rank R of W`` so a test can count them.
"""

import argparse
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def main_worker(gpu: int, ngpus: int, args: argparse.Namespace) -> None:
    """One rank: join the group, all-reduce, print what it saw."""
    if args.multiprocessing_distributed:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("gloo", rank=gpu, world_size=ngpus)
    else:
        dist.init_process_group("gloo", init_method=args.dist_url)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Parse the imagenet-style flags and start the workers the way they ask."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist-url", default="env://")
    parser.add_argument("--multiprocessing-distributed", action="store_true")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--port", type=int, default=29531)
    args = parser.parse_args()
    if args.multiprocessing_distributed:
        mp.spawn(main_worker, nprocs=args.world_size, args=(args.world_size, args))
    else:
        main_worker(0, 1, args)


if __name__ == "__main__":
    main()
