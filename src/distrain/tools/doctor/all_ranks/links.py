"""The all-ranks doctor's link check: bandwidth and latency of every node-to-node link.

One process per node (its local rank 0, the "leader") talks to each other node's leader with
point-to-point ``send``/``recv`` on the gloo group, one pair at a time while every other rank
waits at a barrier, so each number is that link alone:

- latency: the median round trip of a 1-byte message (20 after 3 untimed);
- bandwidth: one message, then an acknowledgement back; the message doubles from 1 MiB until
  one takes at least ``TARGET_S`` (or reaches ``MAX_BYTES``), then the median of three at that
  size counts.  One direction (lower node → higher node) is measured.

How it decides (``verdict``): DDP overlaps the gradient all-reduce with the backward pass, so a
link starves training when all-reducing one step's gradients over it takes longer than the
step's computation.  A ring all-reduce across N nodes sends ``2(N-1)/N × gradient bytes`` through
every node's link, so the estimate is ``sync_s = 2(N-1)/N × 4 × params / bandwidth`` for fp32
gradients; the link warns when ``sync_s > step_s``.  ``params`` and ``step_s`` are the user's
(``--model-params``, ``--step-time``); the defaults describe ResNet-50 (25.6 M parameters) at
0.25 s per step.  The fix names the DDP communication hook that would bring ``sync_s`` under
``step_s``: bf16/fp16 halve the bytes; PowerSGD sends a low-rank approximation (for rank r and an
m × n weight, r(m+n) instead of mn numbers: a few percent for ResNet-sized layers).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from distrain.tools.doctor.check import Check

GROUP = "ranks"
#: a bandwidth message grows until one takes this long
TARGET_S = 0.2
MIN_BYTES = 1 << 20
MAX_BYTES = 64 << 20
PING_ITERS, PING_WARMUP = 20, 3
#: ResNet-50, the usual yardstick, at a typical GPU step time
DEFAULT_PARAMS = 25_600_000
DEFAULT_STEP_S = 0.25


def leaders(entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """node rank → the check-in entry of that node's lowest rank (the one that measures)."""
    out: dict[int, dict[str, Any]] = {}
    for e in sorted(entries, key=lambda e: e["rank"]):
        out.setdefault(int(e["node"]["node_rank"]), e)
    return out


def node_name(entry: dict[str, Any]) -> str:
    """'node 1 (host, 10.0.0.2)': how a report names a node."""
    node = entry["node"]
    return f"node {node['node_rank']} ({entry['hostname']}, {node['address']})"


def _ping(peer: int, sender: bool) -> float:
    """Median round trip of a one-byte message to/from `peer`, in microseconds."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(1, dtype=torch.uint8)
    times = []
    for i in range(PING_WARMUP + PING_ITERS):
        start = time.perf_counter()
        if sender:
            dist.send(t, dst=peer)
            dist.recv(t, src=peer)
        else:
            dist.recv(t, src=peer)
            dist.send(t, dst=peer)
        if i >= PING_WARMUP:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _stream(peer: int, sender: bool) -> tuple[int, float]:
    """(bytes, seconds) of the counted bandwidth message; the sender picks sizes, tells receiver."""
    import torch
    import torch.distributed as dist

    ctrl = torch.zeros(1, dtype=torch.int64)
    ack = torch.zeros(1, dtype=torch.uint8)
    if not sender:
        buf = torch.empty(0, dtype=torch.uint8)
        while True:
            dist.recv(ctrl, src=peer)
            size = int(ctrl.item())
            if size == 0:
                return 0, 0.0
            if buf.numel() < size:
                buf = torch.empty(size, dtype=torch.uint8)
            dist.recv(buf[:size], src=peer)
            dist.send(ack, dst=peer)
    buf = torch.ones(MAX_BYTES, dtype=torch.uint8)

    def once(size: int) -> float:
        ctrl.fill_(size)
        dist.send(ctrl, dst=peer)
        start = time.perf_counter()
        dist.send(buf[:size], dst=peer)
        dist.recv(ack, src=peer)
        return time.perf_counter() - start

    size = MIN_BYTES
    while once(size) < TARGET_S and size < MAX_BYTES:
        size *= 2
    seconds = statistics.median(once(size) for _ in range(3))
    ctrl.fill_(0)
    dist.send(ctrl, dst=peer)
    return size, seconds


def measure_links(rank: int, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rank calls this; node leaders measure each pair in turn.  Rank 0 gets the links."""
    import torch.distributed as dist

    heads = leaders(entries)
    nodes = sorted(heads)
    links: list[dict[str, Any]] = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            ra, rb = heads[a]["rank"], heads[b]["rank"]
            if rank in (ra, rb):
                rtt = _ping(rb if rank == ra else ra, sender=rank == ra)
                nbytes, seconds = _stream(rb if rank == ra else ra, sender=rank == ra)
                if rank == ra:
                    links.append(
                        {
                            "nodes": [a, b],
                            "ranks": [ra, rb],
                            "rtt_us": rtt,
                            "bytes": nbytes,
                            "seconds": seconds,
                            "bytes_per_s": nbytes / seconds,
                        }
                    )
            dist.barrier()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, links)
    return sorted((link for part in gathered for link in part), key=lambda link: link["nodes"])


def _gbit(bytes_per_s: float) -> str:
    return (
        f"{bytes_per_s * 8 / 1e9:.2f} Gbit/s"
        if bytes_per_s >= 1.25e8
        else f"{bytes_per_s * 8 / 1e6:.0f} Mbit/s"
    )


def suggest_hook(sync_s: float, step_s: float) -> str:
    """The DDP comm hook that would bring the gradient sync under the step time, as a fix line."""
    if sync_s / 2 <= step_s:
        return (
            "ctx.prepare_model(model, comm_hook='bf16') (or 'fp16') halves the bytes: "
            f"~{sync_s / 2:.2f} s per step "
            f"instead of {sync_s:.2f} s; or a faster network (check the NIC speed with ethtool; "
            "InfiniBand/RoCE with NCCL)."
        )
    return (
        "ctx.prepare_model(model, comm_hook='powersgd:rank=4') sends a low-rank approximation "
        "(a few percent of "
        f"the {sync_s:.1f} s of fp32 traffic; bf16 alone would still take {sync_s / 2:.1f} s); "
        "also consider fewer, "
        "larger steps (gradient accumulation with model.no_sync()) or a faster network."
    )


def verdict(
    links: list[dict[str, Any]], host_of: dict[int, dict[str, Any]], params: int, step_s: float
) -> Check:
    """One check naming every link whose gradient all-reduce would take longer than a step."""
    n = len(host_of)
    if n < 2:
        return Check(
            "ranks.links",
            GROUP,
            "node links",
            "ok",
            "all ranks on one node: no link between nodes to measure",
            None,
            {"links": [], "nodes": n},
        )
    factor = 2 * (n - 1) / n
    grad_bytes = 4 * params
    slow, lines = [], []
    for link in links:
        a, b = (node_name(host_of[x]) for x in link["nodes"])
        link["sync_s"] = factor * grad_bytes / link["bytes_per_s"]
        text = (
            f"{a} <-> {b}: {_gbit(link['bytes_per_s'])}, round trip {link['rtt_us']:.0f} us; "
            f"all-reducing {params / 1e6:.1f} M fp32 gradients ({grad_bytes / 1e6:.0f} MB) over it "
            f"takes ~{link['sync_s']:.2f} s"
        )
        if link["sync_s"] > step_s:
            slow.append(link)
            text += (
                f", {link['sync_s'] / step_s:.1f}x the {step_s:g} s step: this link "
                "starves training"
            )
        lines.append(text)
    data = {
        "links": links,
        "nodes": n,
        "model_params": params,
        "step_s": step_s,
        "gradient_bytes": grad_bytes,
        "slow": [link["nodes"] for link in slow],
    }
    if not slow:
        return Check(
            "ranks.links",
            GROUP,
            "node links",
            "ok",
            "; ".join(lines) + f" (under the {step_s:g} s step)",
            None,
            data,
        )
    worst_link = max(slow, key=lambda link: link["sync_s"])
    fix = (
        suggest_hook(worst_link["sync_s"], step_s)
        + f" (Judged for {params / 1e6:.1f} M parameters and a {step_s:g} s step: "
        "pass --model-params and --step-time for your job.)"
    )
    return Check("ranks.links", GROUP, "node links", "warn", "; ".join(lines), fix, data)
