"""The campaign tests itself: each known break of distrain, applied alone to a scratch copy of
the checkout's distrain (src/), must get a bad verdict from the trial chosen to catch it.

    python3 benchmarks/chaos/campaign.py --self-check             # every break, and the control
    python3 benchmarks/chaos/campaign.py --self-check --breaks resume_from_scratch

A break is a source edit under src/ (the text it replaces must be found exactly once: a break that
no longer applies is reported, not skipped) or an environment setting, and the cheapest trial that
should catch it (kind, fault, seed).  The control runs the same trials on the unbroken code: they
must keep the promise, or a break "caught" there proves nothing.  One line per break with its
verdict; exit 0 only when the control kept the promise and every break was caught.

The trials run in the campaign's own process and in `--jobs` (2) workers forked from it before
any trial, judged by the unbroken oracle; only the jobs' distrain changes (`campaign.SRC`, the
break's copy).  A kind's uninterrupted run, which every trial of the kind is judged against, is of
the unbroken code and run once per kind, before any trial (it was rerun on the broken copy by each
break's own campaign process, whose start alone took 7-18 s under load: RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import campaign
import pool
from campaign import Reference
from kinds import KINDS
from oracle import Verdict
from record import Trial, report

REPO = campaign.REPO
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
    Break("reworld_off", "an elastic survivor ignores the snapshots taken on the old world size "
          "and resumes from the disk (8 steps apart), not from memory",
          ((f"{CKPT}/memory_tier/tier.py",
            "        moved = reworld.newest([v[2] for v in gathered])",
            "        moved = None and reworld.newest([v[2] for v in gathered])"),),
          kind="nodes_elastic_memory", fault="lose_node_with_memory", seed=801),
    Break("detached_leftover", "every rank leaves a process that double-forks away, clears its "
          "environment, closes its fds and renames itself",
          (("src/distrain/worker/init.py", "        dump_stacks_on_signal()  # kill -USR1",
            f"        {DETACH}\n        dump_stacks_on_signal()  # kill -USR1"),)),
)  # fmt: skip
#: the unbroken copy on the same trials
CONTROL = Break("control", "no break: the same trials on the code as it is")


def copy_src(dest: Path) -> Path:
    """The checkout's src/ (tracked and untracked-but-not-ignored files) copied under `dest`."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z", "src"],
        capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest / "src"


def apply(brk: Break, root: Path) -> str | None:
    """Edit the copy at `root`; the reason it cannot be applied, or None."""
    for name, text, replacement in brk.edits:
        if not name.startswith("src/"):  # the jobs run the copy's src/ alone
            return f"{name}: not under src/"
        path = root / name
        source = path.read_text()
        if source.count(text) != 1:
            return f"{name}: the text to replace occurs {source.count(text)} times, not once"
        path.write_text(source.replace(text, replacement))
    return None


def trials(brk: Break, src: Path, work: Path, ref: Reference, tag: str) -> list[Trial]:
    """The break's trials, their jobs running the distrain at `src` with the break's environment
    (`tag`: in their trials' names); each trial's line printed as the campaign prints it."""
    campaign.SRC, campaign.TAG = src, f"{os.getpid()}-{tag}"
    before = {name: os.environ.get(name) for name in brk.env}
    os.environ.update(brk.env)  # the jobs' environment is the campaign's, and the break's
    try:
        work.mkdir(parents=True)
        KINDS[brk.kind].prepare(work)
        done = []
        for index in range(brk.trials):
            t = campaign.draw(brk.seed, index, [brk.kind], [brk.fault])
            done.append(campaign.run_trial(t, brk.seed, work, ref))
            report(t, brk.seed, argparse.Namespace(json=None, tsv=None), campaign.COMMIT)
        return done
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def verdicts(done: list[Trial]) -> str:
    """The fault's line, then the verdict of each trial: a catch is worth as much as its aim."""
    lines = []
    for t in done:
        v = t.verdict or Verdict("no verdict")
        word = v.word if v.ok else v.word.upper()
        lines.append(f"{t.what} -> {word} ({t.seconds:.0f} s) {v.detail}"[:240])
    return "; ".join(lines)


def reference(kind: str, tmp: Path) -> Reference:
    """The kind's uninterrupted run on the unbroken code (every trial of the kind, control and
    breaks, is judged against it)."""
    campaign.SRC, campaign.TAG = REPO / "src", f"{os.getpid()}-ref-{kind}"
    work = tmp / f"ref-{kind}"
    work.mkdir(parents=True)
    KINDS[kind].prepare(work)
    ref = campaign.twice(KINDS[kind], work, 1)
    print(f"reference {kind}: {ref.total:.1f} s", flush=True)
    return ref


def control(spec: Break, tmp: Path, ref: Reference) -> tuple[bool, str]:
    """The break's trials on the unbroken code: (whether every trial kept the promise, line)."""
    name = f"control ({spec.kind}, {spec.fault}, seed {spec.seed})"
    tag = f"control-{spec.kind}-{spec.fault}-{spec.seed}"
    done = trials(spec, REPO / "src", tmp / tag, ref, tag)
    ok = bool(done) and all(t.verdict is not None and t.verdict.ok for t in done)
    return ok, f"{name}: {'kept the promise' if ok else 'BROKE IT'}: {verdicts(done)}"


def spec_of(brk: Break) -> tuple[str, str, int, int]:
    """The trials a break is caught by: kind, fault, seed, how many."""
    return brk.kind, brk.fault, brk.seed, brk.trials


def run(brk: Break, tmp: Path, ref: Reference) -> tuple[bool, str]:
    """Run the break's trials on a broken copy: (whether a trial got a bad verdict, line)."""
    src = copy_src(tmp / brk.name)
    why = apply(brk, tmp / brk.name)
    if why:
        return False, f"{brk.name}: cannot apply: {why}"
    done = trials(brk, src, tmp / f"{brk.name}-work", ref, brk.name)
    caught = any(t.verdict is not None and not t.verdict.ok for t in done)
    return caught, f"{brk.name}: {'caught' if caught else 'PASSED UNSEEN'}: {verdicts(done)}"


def case(what: str, brk: Break, tmp: Path, ref: Reference | None) -> tuple[bool, str]:
    """One control or break (`what`), every process and namespace it made gone after it; a crash
    of the campaign's own is no verdict: (False, why)."""
    name = "control" if what == "control" else brk.name
    try:
        if ref is None:
            return False, f"{name}: no reference run of {brk.kind} (it failed)"
        return control(brk, tmp, ref) if what == "control" else run(brk, tmp, ref)
    except (SystemExit, Exception) as err:
        return False, f"{name}: ERROR (no verdict): {type(err).__name__}: {err}"
    finally:
        pool.cleanup()


def safe_reference(kind: str, tmp: Path) -> tuple[str, Reference | None]:
    """(kind, its reference), None where its run failed (said)."""
    try:
        return kind, reference(kind, tmp)
    except (SystemExit, Exception) as err:
        print(f"reference {kind}: failed: {type(err).__name__}: {err}", flush=True)
        return kind, None
    finally:
        pool.cleanup()


def main(names: list[str] | None = None, jobs: int = 2) -> int:
    """The kinds' references, then the controls and every break (or those named), `jobs` at a
    time; 0 when every control kept the promise and every break was caught."""
    chosen = [b for b in BREAKS if not names or b.name in names]
    unknown = set(names or ()) - {b.name for b in BREAKS}
    if unknown:
        print(f"unknown break(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    # imported now, not at the first fault (campaign.main says why)
    import distrain.checkpoint.files  # noqa: F401

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    results: list[bool] = []
    specs = list(dict.fromkeys(spec_of(b) for b in chosen))
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
        try:
            with pool.forked(jobs) as each:  # forked before any torch work in this process
                kinds = dict.fromkeys(kind for kind, *_ in specs)
                refs = dict(each(pool.call, [(safe_reference, k, Path(tmp)) for k in kinds]))
                cases = [(case, "control", Break("control", "", (), {}, *spec), Path(tmp),
                          refs[spec[0]]) for spec in specs]  # fmt: skip
                cases += [(case, "break", brk, Path(tmp), refs[brk.kind]) for brk in chosen]
                # the two-node kinds first: the longest cases, not left for one worker at the end
                cases.sort(key=lambda c: -KINDS[c[2].kind].nodes)
                for ok, line in each(pool.call, cases):
                    print(line, flush=True)
                    results.append(ok)
        finally:
            pool.cleanup()
    return 0 if all(results) else 1
