"""What each process of a job holds at its first step, and the files the launcher's folders hold.

    python3 scripts/module_census.py               # a fast-start and a spawn job, printed
    python3 scripts/module_census.py --replicas 2  # the replica groups' job too (needs torchft)
    python3 scripts/module_census.py --replicas 2 --cpu  # the same under the CPU rehearsal

One job, ``distrain run -n 1 [--start-method spawn] one_step.py``, measured from inside its
processes, not from their imports:

- the worker: the script dumps ``sorted(m for m in sys.modules if m.startswith("distrain"))``
  right after its first ``ctx.step(opt)`` (of 4: the step breakdown
  reports from the second on) (``worker-<pid>.txt``), prints the same list on its
  stdout (the direct dump a test compares the figure with), then waits for the launcher's dump;
- the launcher: ``distrain run`` is started through :data:`LAUNCHER_HOOK` (``python -c``), which
  starts a 20 ms interval timer (``SIGALRM``; a watching thread would make the fast start exec
  its fork server instead of forking it from the launcher, another path than users take) and
  then calls ``distrain.cli.entry_point`` as the console script does.
  When the first worker's dump appears, the timer's handler dumps the launcher's ``sys.modules``
  (``launcher.txt``): the launcher as it is while its worker is at its first step.  No hook in
  distrain itself: the measured code is the code users run;
- the launcher's folders: the job runs with ``TMPDIR`` in the census folder, so every folder the
  launcher makes with ``tempfile.mkdtemp(prefix="distrain-…")`` (the job's folder with its event
  stream, the replica groups' shared folder, the fast start's fallback folder) lies there.  The
  handler lists them every 20 ms until the launcher exits (they are removed at its end), and
  records every file name seen, digits as ``{}`` (``group.0`` → ``group.{}``), and once more
  just before the launcher process removes a folder (``shutil.rmtree``, wrapped in the hook).
  A file created and removed between two looks is missed; distrain's stay until the folder goes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: the one-step script: the smallest real training step (DDP on gloo, the global-batch loader)
ONE_STEP = """
import os, sys, time
import torch, distrain
ctx = distrain.init()
model = ctx.prepare_model(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = ctx.prepare_loader(torch.utils.data.TensorDataset(torch.ones(8, 4)), batch_size=2)
def dump():
    out = os.environ.get("MODULE_CENSUS_DIR")
    if not out:  # the reader's path (scripts/reader_path/) runs this script too
        return
    held = sorted(m for m in sys.modules if m.startswith("distrain"))
    print("CENSUS", " ".join(held), flush=True)
    # the launcher's code the process keeps alive whatever sys.modules says: the modules whose
    # functions live (a fork keeps its parent's call stack, and each frame its module's globals)
    import gc, types
    gc.collect()  # garbage the collector has not reached yet is not alive (a module's dict cycle)
    fns = [f for f in gc.get_objects() if isinstance(f, types.FunctionType)]
    alive = {f.__globals__.get("__name__") for f in fns}
    with open(os.path.join(out, f"code-{os.getpid()}.txt"), "w") as f:
        f.write("\\n".join(sorted(str(m) for m in alive if str(m).startswith("distrain.launch"))))
    part = os.path.join(out, f".worker-{os.getpid()}")
    with open(part, "w") as f:
        f.write("\\n".join(held))
    os.rename(part, os.path.join(out, f"worker-{os.getpid()}.txt"))
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(out, "launcher.txt")) and time.monotonic() < deadline:
        time.sleep(0.02)
for i, (x,) in enumerate(loader):
    ctx.backward(model(x).sum())
    ctx.step(opt)
    if i == 0:
        dump()
"""

#: `python -c` program that runs `distrain run` as the console script does, with the watch
LAUNCHER_HOOK = """
import atexit, os, re, signal, sys
out, tmp = os.environ["MODULE_CENSUS_DIR"], os.environ["TMPDIR"]
files = set()
def look():
    for root, _, names in os.walk(tmp):
        rel = os.path.relpath(root, tmp).split(os.sep)
        if rel[0].startswith("distrain-"):
            kind = rel[0].rsplit("-", 1)[0]
            files.update(kind + "/" + re.sub(r"\\d+", "{}", n) for n in names)
dumped, busy = [], []
def watch(*_):
    # the timer fires every 20 ms whatever the handler does, and Python runs a handler again
    # inside itself: under load a second dump renamed the first one's file away mid-dump
    if busy:
        return
    busy.append(True)
    try:
        look()
        if not dumped and any(n.startswith("worker-") for n in os.listdir(out)):
            held = sorted(m for m in sys.modules if m.startswith("distrain"))
            with open(os.path.join(out, ".launcher"), "w") as f:
                f.write("\\n".join(held))
            os.rename(os.path.join(out, ".launcher"), os.path.join(out, "launcher.txt"))
            dumped.append(True)
    finally:
        busy.clear()
def at_exit():
    signal.setitimer(signal.ITIMER_REAL, 0)  # the interpreter's end puts SIGALRM back to default
    look()
    with open(os.path.join(out, "files.txt"), "w") as f:
        f.write("\\n".join(sorted(files)))
atexit.register(at_exit)
import shutil
rmtree = shutil.rmtree
def look_then_rmtree(path, *args, **kwargs):
    look()  # the launcher removes its folders at its end, maybe within a look's 20 ms
    return rmtree(path, *args, **kwargs)
shutil.rmtree = look_then_rmtree
# a timer, not a thread: the fast start forks its server from the launcher only while the
# launcher runs no other thread (launch/fast_start/server_fork.py), else it execs a fresh one
signal.signal(signal.SIGALRM, watch)
signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
from distrain.cli import entry_point
entry_point()
"""


@dataclass
class Census:
    """One job's census: the distrain modules each process held, the launcher's folders' files."""

    launcher: list[str]
    worker: list[str]
    #: the worker's own dump, printed on its stdout (what a test compares `worker` with)
    worker_printed: list[str]
    #: the `distrain.launch*` modules whose functions the worker keeps alive (in sys.modules or not)
    worker_launch_code: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def census(*options: str, nproc: int = 1, timeout: float = 300) -> Census:
    """Run ``distrain run -n <nproc> <options> one_step.py`` and read what its processes held."""
    with tempfile.TemporaryDirectory(prefix="census-") as tmp:
        out, tmpdir = Path(tmp, "out"), Path(tmp, "tmp")
        out.mkdir()
        tmpdir.mkdir()
        script = Path(tmp, "one_step.py")
        script.write_text(ONE_STEP)
        env = dict(
            os.environ,
            MODULE_CENSUS_DIR=str(out),
            TMPDIR=str(tmpdir),
            PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        )
        cmd = [sys.executable, "-c", LAUNCHER_HOOK, "run", "-n", str(nproc), *options, str(script)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        workers = sorted(out.glob("worker-*.txt"))
        if res.returncode or not workers or not (out / "launcher.txt").exists():
            raise RuntimeError(
                f"the census job {options} failed ({res.returncode}): {res.stderr[-3000:]}"
            )
        code = out / workers[0].name.replace("worker-", "code-")
        printed = re.findall(r"^(?:\[[^\]]*\]:?\s*)?CENSUS (.*)$", res.stdout, re.M)
        return Census(
            launcher=(out / "launcher.txt").read_text().split(),
            worker=workers[0].read_text().split(),
            worker_printed=printed[0].split() if printed else [],
            worker_launch_code=code.read_text().split(),
            files=(out / "files.txt").read_text().split(),
        )


def main() -> None:
    """Print each process's module count and list, and the launcher's folders' files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=0, help="also a job of R replica groups")
    parser.add_argument("--cpu", action="store_true", help="the replica job under `run --cpu`")
    args = parser.parse_args()
    jobs: dict[str, tuple[str, ...]] = {"fast start": (), "spawn": ("--start-method", "spawn")}
    if args.replicas:
        jobs["replicas"] = ("--replicas", str(args.replicas), *(("--cpu",) if args.cpu else ()))
    for name, options in jobs.items():
        found = census(*options)
        launch = [m for m in found.worker if m.startswith("distrain.launch")]
        print(
            f"{name}: launcher {len(found.launcher)}, worker {len(found.worker)} "
            f"({len(launch)} distrain.launch*; launcher code alive: "
            f"{len(found.worker_launch_code)} modules)"
        )
        print("  launcher:", " ".join(found.launcher))
        print("  worker:", " ".join(found.worker))
        print("  launcher code alive in the worker:", " ".join(found.worker_launch_code))
        print("  files:", " ".join(found.files))


if __name__ == "__main__":
    main()
