"""The campaign tests itself: each known break of distrain, applied alone to a scratch copy of
the checkout, must get a bad verdict from the trial chosen to catch it.

    python3 benchmarks/chaos/campaign.py --self-check             # every break, and the control
    python3 benchmarks/chaos/campaign.py --self-check --breaks resume_from_scratch

A break is a source edit (the text it replaces must be found exactly once: a break that no longer
applies is reported, not skipped) or an environment setting, and the cheapest trial that should
catch it (kind, fault, seed).  The control runs the same trials on the unbroken copy: they must
keep the promise, or a break "caught" there proves nothing.  One line per break with its verdict;
exit 0 only when the control kept the promise and every break was caught.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CKPT = "src/distrain/checkpoint"


#: a line put into distrain.init() by the detached_leftover break: setsid, then a subshell sent to
#: the background exits at once (its child reparents to init), `env -i` drops CHAOS_TRIAL,
#: Popen closes the fds, and `exec -a` renames the sleep
DETACH = (
    "import subprocess as _sp; _sp.Popen(['setsid', 'sh', '-c', '(env -i /bin/bash -c "
    '"exec -a kworker-x /bin/sleep 600" </dev/null >/dev/null 2>&1 &)\'], '
    "stdin=_sp.DEVNULL, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL, close_fds=True)"
)


@dataclass(frozen=True)
class Break:
    """One known way to break the promise, and the trial that must catch it."""

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...] = ()  # (file, text, replacement)
    env: dict[str, str] = field(default_factory=dict)
    kind: str = "ddp_small"
    fault: str = "kill_rank"
    seed: int = 5
    trials: int = 1


BREAKS = (
    Break("resume_from_scratch", "resume ignores every checkpoint and retrains from step 0",
          ((f"{CKPT}/checkpointer.py", "path = find_latest_valid(self.directory)",
            "path = None"),)),
    Break("resume_raises", "every resume raises an error",
          ((f"{CKPT}/checkpointer.py",
            "        shared = loading.load(path, self._reg, self.process.rank,",
            "        raise CheckpointError('broken on purpose')\n"
            "        shared = loading.load(path, self._reg, self.process.rank,"),)),
    Break("rng_not_restored", "a resume keeps the fresh process's RNG (dropout differs)",
          ((f"{CKPT}/loading.py", 'set_rng_state(own["rng"])', "pass"),)),
    Break("loader_position_lost", "a resume starts the epoch's batches over",
          ((f"{CKPT}/loading.py", "            obj.load_state_dict(states[name])",
            "            if name != 'loader':\n"
            "                obj.load_state_dict(states[name])"),)),
    Break("death_signal_off", "ranks outlive a SIGKILLed launcher (no PR_SET_PDEATHSIG)",
          (("src/distrain/process/lineage.py",
            "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))", "0"),),
          fault="corrupt_newest"),
    Break("world_change_refused", "a per-process batch's loader refuses its own checkpoint once "
          "a lost node changed the global batch (issue 41; two namespaces: root)",
          (("src/distrain/data/sampler.py",
            '        saved_len = int(state.get("dataset_len", sampler.dataset_len))',
            '        if int(state.get("global_batch_size", gbs)) != gbs:\n'
            '            raise ValueError("saved global batch != current (broken on purpose)")\n'
            '        saved_len = int(state.get("dataset_len", sampler.dataset_len))'),),
          kind="nodes_elastic_batch", fault="kill_node_launcher", seed=15),
    Break("atomic_save_off", "DISTRAIN_ATOMIC_SAVE=0, the launcher killed while the script saves",
          env={"DISTRAIN_ATOMIC_SAVE": "0"}, kind="rehearsal", fault="kill_launcher_in_save"),
    Break("memory_not_used", "a restart ignores the memory snapshots and resumes from the disk "
          "(8 steps apart): from the newest valid checkpoint, but losing up to 8 steps",
          ((f"{CKPT}/memory_tier/tier.py", "        step = max(common, default=None)",
            "        step = None"),), kind="memory", seed=30),  # trial 0: a kill at step 11+
    Break("peer_copy_off", "no copy on the peer node: a node lost with its memory resumes from "
          "the disk (8 steps apart), not from the peer's copy of its snapshot",
          ((f"{CKPT}/memory_tier/tier.py",
            "        if self.process.num_nodes > 1 and self.group is not None:",
            "        if False:"),), kind="nodes_static_memory", fault="lose_node_with_memory",
          seed=62),  # trial 0: node 0 lost (no rejoin wait) at step 35+, 3+ after a disk save
    Break("detached_leftover", "every rank leaves a process that double-forks away, clears its "
          "environment, closes its fds and renames itself",
          (("src/distrain/worker/init.py", "        dump_stacks_on_signal()  # kill -USR1",
            f"        {DETACH}\n        dump_stacks_on_signal()  # kill -USR1"),)),
)  # fmt: skip
#: the unbroken copy on the same trials
CONTROL = Break("control", "no break: the same trials on the code as it is")


def copy_checkout(dest: Path) -> None:
    """The checkout's tracked and untracked-but-not-ignored files, copied to `dest`."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def apply(brk: Break, root: Path) -> str | None:
    """Edit the copy at `root`; the reason it cannot be applied, or None."""
    for name, text, replacement in brk.edits:
        path = root / name
        source = path.read_text()
        if source.count(text) != 1:
            return f"{name}: the text to replace occurs {source.count(text)} times, not once"
        path.write_text(source.replace(text, replacement))
    return None


def run(brk: Break) -> tuple[bool, str]:
    """Run the break's trials on a broken copy: (whether the outcome is the expected one, line)."""
    with tempfile.TemporaryDirectory(prefix=f"selfcheck-{brk.name}-") as tmp:
        root = Path(tmp)
        copy_checkout(root)
        why = apply(brk, root)
        if why:
            return False, f"{brk.name}: cannot apply: {why}"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(PYTHONPATH=str(root / "src"), **brk.env)
        cmd = [sys.executable, str(root / "benchmarks/chaos/campaign.py"), "--seed",
               str(brk.seed), "--trials", str(brk.trials), "--kinds", brk.kind, "--faults",
               brk.fault, "--reference-runs", "1"]  # fmt: skip
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in res.stdout.splitlines() if re.match(r"trial +\d+ ", ln)]
    # the fault's line, then the verdict: a catch is worth as much as the fault's aim
    verdicts = "; ".join(re.sub(r"^.*? at \d\.\d\d: ", "", ln)[:240] for ln in lines)
    verdicts = verdicts or res.stderr[-300:]
    if brk.name == CONTROL.name:
        ok = res.returncode == 0 and bool(lines)
        return ok, f"control: {'kept the promise' if ok else 'BROKE IT'}: {verdicts}"
    caught = res.returncode == 1 and "BROKE THE ORACLE" in res.stdout
    return caught, f"{brk.name}: {'caught' if caught else 'PASSED UNSEEN'}: {verdicts}"


def main(names: list[str] | None = None) -> int:
    """Run the control, then every break (or those named); 0 when all were caught."""
    chosen = [b for b in BREAKS if not names or b.name in names]
    unknown = set(names or ()) - {b.name for b in BREAKS}
    if unknown:
        print(f"unknown break(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    results = []
    for trial in {(b.kind, b.fault, b.seed, b.trials) for b in chosen}:
        kind, fault, seed, trials = trial
        ok, line = run(Break("control", CONTROL.what, (), {}, kind, fault, seed, trials))
        line = line.replace("control", f"control ({kind}, {fault}, seed {seed})", 1)
        print(line, flush=True)
        results.append(ok)
    for brk in chosen:
        ok, line = run(brk)
        print(line, flush=True)
        results.append(ok)
    return 0 if all(results) else 1
