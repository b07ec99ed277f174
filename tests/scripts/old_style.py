"""An old script for torch.distributed.launch: parses --local_rank, imports no distrain."""

import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, required=True)
p.add_argument("out")
args = p.parse_args()
with open(os.path.join(args.out, f"old{os.environ['RANK']}.txt"), "w") as f:
    f.write(f"{args.local_rank} {os.environ['LOCAL_RANK']}")
