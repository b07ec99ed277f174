"""A tutorial-style script (no distrain import) that asks for NCCL: fails on a CPU-only machine."""

import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    print("process group formed")


main()
