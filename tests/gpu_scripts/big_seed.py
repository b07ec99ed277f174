"""A CUDA script seeded from the whole unsigned 64-bit range, as ``torch.seed()`` draws seeds:
torch.compile reads the CUDA generator's state before tracing (torchtitan's llama3 failed there
under `distrain run --cpu` with "Overflow when unpacking long long").  Rank 0 writes the seed it
reads back after a state round trip, and the compiled function's result, to ``--out``."""

import argparse
import json
import os

import torch
import torch.distributed as dist

SEED = 2**64 - 3

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(SEED)
state = torch.cuda.get_rng_state()
torch.cuda.set_rng_state(state)
double = torch.compile(lambda x: x * 2)
out = double(torch.ones(3, device="cuda"))
if dist.get_rank() == 0:
    with open(os.path.join(args.out, "seed.json"), "w") as f:
        json.dump({"seed": torch.cuda.initial_seed(), "sum": float(out.sum())}, f)
dist.barrier()
dist.destroy_process_group()
