"""SLURM `srun`: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NODELIST."""

from __future__ import annotations

import os
import re

from distrain.cluster.base import ClusterEnvironment, ClusterError, env_int


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand SLURM's compressed host lists: `node[01-04,07],gpu-a[1-2]x` → every host name."""
    hosts: list[str] = []
    for item in _split_top_level(nodelist):
        hosts.extend(_expand_one(item))
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]+)\]", item)
    if not match:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end() :]
    out: list[str] = []
    for rng in match.group(1).split(","):
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            width = len(lo)
            for n in range(int(lo), int(hi) + 1):
                out.extend(_expand_one(f"{prefix}{n:0{width}d}{suffix}"))
        else:
            out.extend(_expand_one(f"{prefix}{rng}{suffix}"))
    return out


class SLURMEnvironment(ClusterEnvironment):
    """A task started by `srun` (not an interactive `salloc` shell or the batch script itself)."""

    name = "slurm"

    @classmethod
    def detect(cls) -> bool:
        """True inside an srun task: SLURM_PROCID and SLURM_NTASKS set, not an interactive shell."""
        if "SLURM_PROCID" not in os.environ or "SLURM_NTASKS" not in os.environ:
            return False
        return os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")

    def rank(self) -> int:
        """SLURM_PROCID."""
        return env_int("SLURM_PROCID")

    def world_size(self) -> int:
        """SLURM_NTASKS."""
        return env_int("SLURM_NTASKS")

    def local_rank(self) -> int:
        """SLURM_LOCALID."""
        return env_int("SLURM_LOCALID")

    def local_world_size(self) -> int:
        """Tasks on this node: SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE's first entry."""
        if "SLURM_NTASKS_PER_NODE" in os.environ:
            return env_int("SLURM_NTASKS_PER_NODE")
        raw = os.environ.get("SLURM_TASKS_PER_NODE", "")  # e.g. "2(x3),1"
        match = re.match(r"(\d+)", raw)
        return int(match.group(1)) if match else self.world_size() // self.num_nodes()

    def node_rank(self) -> int:
        """SLURM_NODEID."""
        return env_int("SLURM_NODEID")

    def num_nodes(self) -> int:
        """SLURM_NNODES, else the length of the node list."""
        if "SLURM_NNODES" in os.environ:
            return env_int("SLURM_NNODES")
        return len(self.hosts()) or 1

    def hosts(self) -> list[str]:
        """Every host of the job step, expanded from SLURM_STEP_NODELIST / SLURM_NODELIST."""
        raw = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_NODELIST", "")
        return expand_nodelist(raw) if raw else []

    def master_addr(self) -> str:
        """MASTER_ADDR when set, else the first host of the node list."""
        if "MASTER_ADDR" in os.environ:
            return os.environ["MASTER_ADDR"]
        hosts = self.hosts()
        if not hosts:
            raise ClusterError("slurm: neither MASTER_ADDR nor SLURM_NODELIST is set")
        return hosts[0] if self.num_nodes() > 1 else "127.0.0.1"

    def master_port(self) -> int:
        """MASTER_PORT when set, else derived from the job id (same on all tasks, as Lightning)."""
        if "MASTER_PORT" in os.environ:
            return env_int("MASTER_PORT")
        job_id = env_int("SLURM_JOB_ID", 0)
        return 15000 + job_id % 20000

    def check_devices(self, gpus_visible: int) -> None:
        """Fail when tasks per node do not match the devices used (the usual sbatch mistake)."""
        tasks, devices_per_node = self.local_world_size(), gpus_visible
        if devices_per_node and tasks != devices_per_node:
            raise ClusterError(
                f"slurm: {tasks} tasks per node but {devices_per_node} GPUs per node are used; "
                f"set #SBATCH --ntasks-per-node={devices_per_node}"
            )
