"""The job kinds of the chaos campaign: how each is started, where its result lies, how two
results are compared.

A kind is *restart-based* (its uninterrupted run is the reference: a trial that finishes must
end bit for bit equal to it) or a *replica* kind (`--replicas`: every group must end at the same
last step with equal parameters; no reference run is needed). The two-node kinds run one
`distrain run` per node, each inside a network namespace of its own (nodes.py): static
(`--nnodes 2 --node-rank i`, judged bit for bit) and elastic (`--nnodes 1:2`, c10d: bit for bit
while both nodes stay; after a node is lost, the survivor must finish at the last step, resumed
from a checkpoint). ``nodes_static_memory`` is the static kind with the memory tier (disk every 8
steps, a snapshot every step, each node its own memory root ``tN-mem/node<i>``): the kind whose
node may be lost together with its memory, to resume from the peer node's copy.
``nodes_elastic_batch`` is the elastic kind as tutorials write it: a fixed per-process batch, so
a lost node changes the global batch mid-epoch; it is judged by what it trained on (every epoch
its permutation's samples in order, each once: tests/helpers/samples.py).
``nodes_elastic_memory`` is the elastic kind with the memory tier, as ``nodes_static_memory``:
after a node's loss the survivor resumes on 1 rank from a snapshot taken on 2.
"""

from __future__ import annotations

import hashlib
import json
import socket
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
EXAMPLES = REPO / "examples"
RUN = ["-m", "distrain.cli", "run"]


@dataclass(frozen=True)
class Job:
    """One run of a kind in `work`: its command, checkpoint folder, output folder."""

    argv: list[str]  # after the interpreter
    ckpt: Path | None
    out: Path
    run_dir: Path
    #: two-node kinds: node i's command (after the interpreter), run inside namespace i
    nodes: list[list[str]] = field(default_factory=list)
    #: a file the job writes once it trained (kinds without distrain's checkpoints)
    marker: Path | None = None
    #: files (a glob in `out`) its ranks write as their training ends: a time-aimed fault's span
    #: ends at the first, not at the launcher's exit (job_progress.training_span)
    trained_end: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: the memory tier's root (``DISTRAIN_MEMORY_DIR``), inside the trial's folder; two nodes:
    #: the folder of each node's own root (``node<i>``, in `node_env`)
    memory: Path | None = None
    #: two-node kinds: node i's own environment, over `env`
    node_env: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Kind:
    """A job kind: `build(work, name, watchdog)` gives its Job; `replicas` says how it is judged."""

    name: str
    replicas: bool = False
    loader_workers: bool = False  # its ranks have DataLoader worker processes to kill
    nodes: int = 1
    elastic: bool = False  # `--nnodes 1:2`: a node may leave and the job go on
    self_starting: bool = False  # the script starts its own workers (mp.spawn)
    #: judged by the samples it trained on (tests/scripts/elastic_samples.py's log)
    samples: bool = False
    #: two nodes with the memory tier (a snapshot every step, disk every 8); the one-node kind
    #: ``memory`` is told by its name
    memory: bool = False

    def job(self, work: Path, name: str, watchdog: int = 0, addrs: list[str] | None = None) -> Job:
        """The command of one run named `name` under `work` (`addrs`: the nodes' addresses)."""
        if self.nodes > 1:
            return self._nodes_job(work, name, watchdog, addrs or [])
        out, ckpt, run_dir = work / f"{name}-out", work / f"{name}-ckpt", work / f"{name}-run"
        launcher = [*RUN, "--run-dir", str(run_dir)]
        if watchdog:
            launcher += ["--watchdog", str(watchdog)]
        restarts = ["--max-restarts", "3"]
        if self.name == "digits":  # DDP with plain BatchNorm, the main example
            argv = [*launcher, "-n", "2", *restarts, str(EXAMPLES / "train_digits.py"),
                    "--epochs", "3", "--out", str(out), "--checkpoint-dir", str(ckpt),
                    "--checkpoint-every", "5"]  # fmt: skip
        elif self.name == "imagefolder":  # ResNet-18, random augmentation, 2 DataLoader workers
            argv = [*launcher, "-n", "2", *restarts, str(EXAMPLES / "train_imagefolder.py"),
                    "--data", str(work / "images"), "--arch", "resnet18", "--image-size", "32",
                    "--epochs", "2", "--batch-size", "4", "--workers", "2", "--out", str(out),
                    "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2"]  # fmt: skip
        elif self.name in ("fsdp", "ddp_small", "memory"):  # FSDP2 (sharded) or DDP, 2 ranks
            strategy = "fsdp" if self.name == "fsdp" else "ddp"
            argv = [*launcher, "-n", "2", *restarts, str(SCRIPTS / "ckpt_worker.py"),
                    "--strategy", strategy, "--epochs", "4", "--step-sleep", "0.1",
                    "--dir", str(ckpt), "--out", str(out / "final.pt"), "--fault-rank",
                    "-1", "--log-steps"]  # fmt: skip
            if self.name == "memory":  # disk every 8 steps, a memory snapshot every step
                mem = work / f"{name}-mem"
                argv += ["--every", "8", "--memory-every", "1"]
                env = {"DISTRAIN_MEMORY_DIR": str(mem)}
                return Job(argv, ckpt, out, run_dir, env=env, memory=mem)
        elif self.name == "rehearsal":  # a CUDA/NCCL script under --cpu, its own snapshots
            # 400 epochs: with 40 the training after the first snapshot took ~2 s of a ~11 s
            # job, so most faults aimed at a rank found the job already past its ranks (missed)
            argv = [*launcher, "--cpu", "-n", "2", *restarts,
                    str(REPO / "tests" / "gpu_scripts" / "snapshot_trainer.py"), "--out", str(out),
                    "--total-epochs", "400"]  # fmt: skip
            return Job(argv, None, out, run_dir, marker=out / "snapshot.pt", trained_end="final.pt")
        elif self.name in ("replicas", "replicas_fsdp"):
            fsdp = self.name == "replicas_fsdp"
            argv = [*launcher, "--replicas", "2", "-n", "2" if fsdp else "1",
                    str(SCRIPTS / "replica_job.py"), "--out", str(out), "--dir", str(ckpt),
                    "--steps", "80", "--every", "10", "--step-sleep", "0.05",
                    *(["--strategy", "fsdp"] if fsdp else [])]  # fmt: skip
        elif self.name == "replicas_readme":  # the README's `opt.step()`: no ctx.step, no restore
            argv = [*launcher, "--replicas", "2", "-n", "1", str(SCRIPTS / "replica_readme.py"),
                    "--out", str(out), "--steps", "80", "--step-sleep", "0.05"]  # fmt: skip
            return Job(argv, None, out, run_dir, marker=out / "trained", trained_end="final.*")
        elif (
            self.name == "selfstart"
        ):  # mp.spawn inside the script: run once, its children are the job
            argv = [*launcher, "-n", "2", *restarts, str(SCRIPTS / "spawn_train.py"), str(out), "2",
                    "--steps", "80", "--step-sleep", "0.1"]  # fmt: skip
            return Job(
                argv,
                None,
                out,
                run_dir,
                marker=out / "started",
                env={"DTEST_MASTER_PORT": str(_port())},
                trained_end="final.pt",
            )
        else:
            raise ValueError(f"unknown kind {self.name}")
        return Job(argv, ckpt, out, run_dir)

    def _nodes_job(self, work: Path, name: str, watchdog: int, addrs: list[str]) -> Job:
        """One launcher per node (`-n 1` each), static or elastic; ckpt_worker.py, DDP, 2 ranks."""
        out, ckpt, run_dir = work / f"{name}-out", work / f"{name}-ckpt", work / f"{name}-run"
        if self.elastic:
            rdzv = ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                    f"{addrs[0]}:29400", "--rdzv-id", name]  # fmt: skip
        else:
            rdzv = ["--nnodes", "2", "--master-addr", addrs[0], "--master-port", "29500"]
        script = [str(SCRIPTS / "ckpt_worker.py"), "--epochs", "6", "--step-sleep", "0.15", "--dir",
                  str(ckpt), "--out", str(out / "final.pt"), "--fault-rank", "-1",
                  "--log-steps"]  # fmt: skip
        if self.samples:  # a per-process batch of 4: global batch 8 on two nodes, 4 on one
            script = [str(SCRIPTS / "elastic_samples.py"), "--dir", str(ckpt), "--samples-log",
                      str(out / "samples.jsonl"), "--epochs", "2", "--step-sleep",
                      "0.15"]  # fmt: skip
        mem = work / f"{name}-mem" if self.memory else None
        if mem is not None:  # the peer copy needs one root per node: a node's loss is its own
            script += ["--every", "8", "--memory-every", "1"]
        nodes = []
        for i in range(len(addrs)):
            launcher = [
                *RUN,
                "--run-dir",
                f"{run_dir}-{i}",
                *rdzv,
                "-n",
                "1",
                "--max-restarts",
                "3",
            ]
            if watchdog:
                launcher += ["--watchdog", str(watchdog)]
            nodes.append([*launcher, *([] if self.elastic else ["--node-rank", str(i)]), *script])
        roots = [{"DISTRAIN_MEMORY_DIR": str(mem / f"node{i}")} for i in range(len(addrs)) if mem]
        # one thread per rank: the result does not depend on how many cores a namespace's rank sees
        return Job(nodes[0], ckpt, out, run_dir, nodes=nodes, env={"DISTRAIN_NUM_THREADS": "1"},
                   memory=mem, node_env=roots)  # fmt: skip

    def prepare(self, work: Path) -> None:
        """Data the kind needs once per campaign (the image folder)."""
        if self.name == "imagefolder" and not (work / "images").exists():
            import sys

            sys.path.insert(0, str(REPO / "tests"))
            from helpers.images import class_folders

            class_folders(work / "images", per_class=16, seed=1)

    def result(self, job: Job) -> dict[str, str]:
        """A digest per tensor (restart kinds) or per group and rank (replica kinds)."""
        if self.samples:
            return {"samples": samples_verdict(job.out / "samples.jsonl")}
        if self.replicas:
            finals = sorted(job.out.glob("final.*.json"))
            return {f.name: f.read_text() for f in finals}
        path = job.out / ("model.pt" if self.name in ("digits", "imagefolder") else "final.pt")
        if self.nodes > 1:  # the last step too: an elastic job that lost a node is judged by it
            return {"step": str(torch.load(path, weights_only=True)["step"]), **_tensors(path)}
        return _tensors(path)


#: what samples_verdict says of a job whose every epoch trained on each sample once, in order
SAMPLES_OK = "every epoch trained on its samples once, in order"


def samples_verdict(log: Path) -> str:
    """SAMPLES_OK, or why the job's samples log breaks the count (tests/helpers/samples.py)."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from helpers.samples import check_epochs

    try:
        check_epochs(log, 240, 2)
    except AssertionError as err:
        return f"samples: {err}"
    return SAMPLES_OK


def _tensors(path: Path) -> dict[str, str]:
    """A digest per tensor and a value per number of the whole saved state: model, optimizer,
    scheduler, step (nested keys joined with '.')."""
    return dict(_flat(torch.load(path, map_location="cpu", weights_only=True), ""))


def _flat(value: object, key: str) -> list[tuple[str, str]]:
    if isinstance(value, torch.Tensor):
        return [(key, _digest(value))]
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flat(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, (list, tuple)):
        return [kv for i, v in enumerate(value) for kv in _flat(v, f"{key}.{i}")]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return [(key, repr(value))]
    return []


def memory_folders(job: Job) -> list[Path]:
    """The memory tier's job folders (``distrain-mem-*``) under the job's memory root, or under
    each node's root (``node<i>/``) on a two-node kind."""
    if job.memory is None:
        return []
    return sorted([*job.memory.glob("distrain-mem-*"), *job.memory.glob("node*/distrain-mem-*")])


#: a script's default `--every` (tests/scripts/; its kinds do not pass one)
SCRIPT_EVERY = {"ckpt_worker.py": 4, "elastic_samples.py": 2}


def intervals(job: Job) -> tuple[int, int | None] | None:
    """The steps between two disk checkpoints (`--checkpoint-every`, `--every`, or the script's
    default) and between two memory snapshots (`--memory-every`; None: no memory tier); None:
    no distrain checkpoint."""
    if job.ckpt is None:
        return None
    argv = job.nodes[0] if job.nodes else job.argv
    given = {a: int(argv[i + 1]) for i, a in enumerate(argv[:-1])
             if a.startswith("--") and argv[i + 1].isdigit() and int(argv[i + 1]) > 0}  # fmt: skip
    disk = given.get("--checkpoint-every", given.get("--every"))
    if disk is None:
        disk = next((n for script, n in SCRIPT_EVERY.items() if any(a.endswith(script)
                     for a in argv)), None)  # fmt: skip
    return None if disk is None else (disk, given.get("--memory-every"))


def interval(job: Job) -> int | None:
    """The steps between two checkpoints of the finest tier (memory K where the kind has one)."""
    tiers = intervals(job)
    return None if tiers is None else min(t for t in tiers if t is not None)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def replica_verdict(result: dict[str, str], expected_step: int | None = None) -> str | None:
    """None when every group ended at the same last step (`expected_step`, the job's `--steps`,
    where given) with equal parameters, else why not."""
    by_rank: dict[str, set[tuple[int, str]]] = {}
    for name, text in result.items():
        final = json.loads(text)
        rank = name.split(".")[2]  # final.<group>.<rank>.json
        by_rank.setdefault(rank, set()).add((int(final["step"]), str(final["params"])))
    if not by_rank:
        return "no group wrote its final state"
    bad = {rank: sorted(seen) for rank, seen in by_rank.items() if len(seen) > 1}
    if bad:
        return f"groups differ: {bad}"
    steps = {step for seen in by_rank.values() for step, _ in seen}
    if expected_step is not None and steps != {expected_step}:
        return f"groups ended at step {sorted(steps)}, not the job's last step {expected_step}"
    return None


KINDS = {
    k.name: k
    for k in (
        Kind("digits"),
        Kind("imagefolder", loader_workers=True),
        Kind("fsdp"),
        Kind("ddp_small"),  # the suite's slice: the smallest restart-based job
        Kind("memory"),  # ddp_small with the memory tier: disk every 8, memory every step
        Kind("rehearsal"),
        Kind("replicas", replicas=True),
        Kind("replicas_fsdp", replicas=True),
        Kind("replicas_readme", replicas=True),
        Kind("selfstart", self_starting=True),
        Kind("nodes_static", nodes=2),
        Kind("nodes_static_memory", nodes=2, memory=True),  # one root per node: a node lost whole
        Kind("nodes_elastic", nodes=2, elastic=True),
        Kind("nodes_elastic_batch", nodes=2, elastic=True, samples=True),
        # the elastic kind with the memory tier: a node lost with its memory, the survivor
        # resumes on its new world size from a snapshot taken on the old one
        Kind("nodes_elastic_memory", nodes=2, elastic=True, memory=True),
    )
}
