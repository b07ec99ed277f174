"""A CUDA script that builds a flex-attention block mask with torch.compile, as torchtitan's
llama3 does (``create_block_mask(..., device="cuda", _compile=True)``): Dynamo reads
``torch.cuda.use_mem_pool.__wrapped__`` while tracing, which a stand-in must have too under
`distrain run --cpu`.  Rank 0 writes the mask's shape and a count of its blocks to ``--out``."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.attention.flex_attention import create_block_mask


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mask = create_block_mask(causal, 1, 1, 256, 256, device="cuda", _compile=True)
if dist.get_rank() == 0:
    with open(os.path.join(args.out, "mask.json"), "w") as f:
        json.dump({"shape": list(mask.shape), "blocks": int(mask.kv_num_blocks.sum())}, f)
dist.barrier()
dist.destroy_process_group()
