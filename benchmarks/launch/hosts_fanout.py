"""Launch → first step: `distrain run --hosts` (one command, ssh fan-out) vs the two-command form.

    python3 benchmarks/launch/hosts_fanout.py --rounds 5

Two network-namespace hosts, each with a real sshd (tests/helpers/ssh_cluster.py), and a third
namespace as the launching machine.  Each round, in alternating order:

- **two commands**: `distrain run --nnodes 2 --node-rank i --master-addr A --master-port P -n 1`
  started in both hosts at the same instant (what a person types on each machine, minus typing),
  each in a session of its own as a login is: with the kernel's autogroup scheduling
  (``/proc/sys/kernel/sched_autogroup_enabled`` = 1 here) every session is a scheduling group, and
  nodes started under sshd (one session each) got about twice the CPU of two nodes sharing the
  benchmark's session on a loaded machine;
- **one command**: `distrain run --hosts h0:1,h1:1 -n 1` in the launching namespace.

Time 0 is just before the command(s) start.  Three ends are timed: the moment both hosts'
``distrain run --node-rank`` processes exist; the moment both ranks exist (a worker is titled
``distrain rank R/W · …`` when its node's rendezvous is done: worker/start/title.py), which is the
fan-out's fair end, since its hosts start their `distrain run` before the launcher's go and hold
it before the rendezvous (launch/hosts/go.py); and the last rank's first training step
(examples/train_digits.py's first ``ctx.log``, read from the run directory: first_step.py),
which on a loaded 2-core machine varies by far more than the fan-out costs.  Prints each form's
median and the median per-round difference.

    python3 benchmarks/launch/hosts_fanout.py --start-only --rounds 9 [--baseline-src /tmp/base/src]

times only the first two ends (each job is stopped, Ctrl-C, as soon as both ranks run: a round
takes seconds, not a training epoch); ``--baseline-src`` adds a third form, the one command run
from another checkout's ``src`` (an older distrain), so that a change to the fan-out is measured
against the code before it, round by round, under the same load.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE))
from first_step import first_steps  # noqa: E402
from helpers.ssh_cluster import ssh_cluster  # noqa: E402

RUN = [sys.executable, "-m", "distrain.cli", "run"]
SCRIPT = [str(REPO / "examples" / "train_digits.py"), "--epochs", "1", "--out"]


def _env(src: Path = REPO / "src") -> dict[str, str]:
    path = os.pathsep.join([str(src), str(REPO / "tests")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "DISTRAIN_DEVICE": "cpu"}


def _node_launchers(run_dir: Path) -> int:
    """How many `distrain run --node-rank` processes of this run exist now (on any host)."""
    mark = str(run_dir)
    found = 0
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if (
            "--node-rank" in cmd
            and mark in cmd
            and "distrain.cli" in cmd
            and "host_node" not in " ".join(cmd[:3])
        ):
            found += 1
    return found


def _workers(run_dir: Path) -> int:
    """How many ranks of this run exist now (on any host): a worker's title is
    ``distrain rank R/W · train_digits.py … --out RUN_DIR/out`` (worker/start/title.py), set when
    its node's rendezvous is done and it starts."""
    mark = str(run_dir)
    found = 0
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith("distrain rank ") and mark in cmd:
            found += 1
    return found


def _wait_first_step(
    run_dir: Path,
    procs: list[subprocess.Popen[str]],
    t0: float,
    timeout: float,
    start_only: bool = False,
) -> tuple[float, float, float]:
    """Seconds until (both hosts' `distrain run` processes exist, both ranks exist, the last
    rank's first step); with `start_only` it returns once both ranks exist (first step NaN).

    The ranks are the fair end for the fan-out: its hosts start their `distrain run` before the
    launcher's go (host_go.py), so the node processes exist before they may rendezvous."""
    deadline, started, ranks = time.monotonic() + timeout, None, None
    while time.monotonic() < deadline:
        if started is None and _node_launchers(run_dir) >= 2:
            started = time.time() - t0
        if ranks is None and _workers(run_dir) >= 2:
            ranks = time.time() - t0
            if start_only:
                return (started if started is not None else float("nan")), ranks, float("nan")
        stamps = first_steps(run_dir / "none", run_dir)
        if len(stamps) >= 2:
            nan = float("nan")
            return (
                started if started is not None else nan,
                ranks if ranks is not None else nan,
                max(stamps) - t0,
            )
        if any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError("a job failed: " + " ".join(str(p.args) for p in procs))
        time.sleep(0.02)
    raise RuntimeError("no first step in time")


def _end(procs: list[subprocess.Popen[str]], start_only: bool) -> None:
    """Wait for the job; with `start_only`, stop it first (Ctrl-C: every host cleans up)."""
    for p in procs:
        if start_only and p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        p.wait(timeout=300)


def two_commands(  # type: ignore[no-untyped-def]
    c, work: Path, port: int, start_only: bool = False
) -> tuple[float, float, float]:
    """(start → both launchers up, → both ranks up, → last rank's first step), one command/host."""
    run_dir = work / f"two-{time.monotonic_ns()}"
    flags = [
        "--nnodes",
        "2",
        "--master-addr",
        c.hosts.addrs[0],
        "--master-port",
        str(port),
        "-n",
        "1",
        "--run-dir",
        str(run_dir),
    ]
    env = _env()
    t0 = time.time()
    procs = [subprocess.Popen(c.hosts.cmd(i,
                                          RUN + flags + ["--node-rank", str(i), *SCRIPT,
                                                         str(run_dir / "out")]), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True) for i in range(2)]  # fmt: skip
    took = _wait_first_step(run_dir, procs, t0, 300, start_only)
    _end(procs, start_only)
    return took


def one_command(
    c, work: Path, start_only: bool = False, src: Path = REPO / "src"
) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """The same three times for `--hosts` from the launching namespace (the distrain in `src`)."""
    run_dir = work / f"one-{time.monotonic_ns()}"
    argv = RUN + ["--hosts", "h0:1,h1:1", "--ssh-opts", f"-F {c.config}", "-x", "OMP_NUM_THREADS",
                  "--run-dir", str(run_dir), *SCRIPT, str(run_dir / "out")]  # fmt: skip
    t0 = time.time()
    proc = subprocess.Popen(
        c.launch_cmd(argv),
        env=_env(src),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    took = _wait_first_step(run_dir, [proc], t0, 300, start_only)
    _end([proc], start_only)
    return took


def _median_s(cmd: list[str], rounds: int = 5) -> float:
    took = []
    for _ in range(rounds):
        t0 = time.time()
        res = subprocess.run(
            cmd, capture_output=True, text=True, env=_env(), stdin=subprocess.DEVNULL, timeout=120
        )
        took.append(time.time() - t0)
        if res.returncode not in (0, 3):  # 3: host_node told nothing (stdin closed) after its check
            raise RuntimeError(f"{cmd}: {res.stderr[-500:]}")
    return statistics.median(took)


def parts(c) -> None:  # type: ignore[no-untyped-def]
    """Where the fan-out's time goes: each piece alone, median of 5, from the launching netns."""
    ssh = ["ssh", "-F", str(c.config), "h0"]
    # the host check alone (host_node itself now starts the node too, before it probes)
    probe = "from distrain.launch.hosts.node import probe; probe({})"
    check = f"cd {REPO} && exec env PYTHONPATH={_env()['PYTHONPATH']} {sys.executable} -c '{probe}'"
    pieces = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "launcher start + ssh -G of both hosts (--dry-run)": RUN + ["--hosts", "h0:1,h1:1",
                                                                    "--ssh-opts", f"-F {c.config}",
                                                                    "--dry-run", *SCRIPT, "x"],
        "ssh session running true": [*ssh, "true"],
        "ssh session running the host check": [*ssh, check],
    }  # fmt: skip
    for name, cmd in pieces.items():
        print(f"{name}: {_median_s(c.launch_cmd(cmd)):.2f} s", flush=True)
    took = []
    for _ in range(3):
        t0 = time.time()
        subprocess.run(["bash", "-c", "source ~/.bashrc >/dev/null 2>&1"], timeout=120)
        took.append(time.time() - t0)
    print(
        "this user's ~/.bashrc alone (bash sources it for commands run by sshd): "
        f"{', '.join(f'{t:.2f}' for t in took)} s"
    )


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--parts", action="store_true", help="time the fan-out's pieces one by one instead"
    )
    parser.add_argument(
        "--start-only", action="store_true", help="time only until both hosts' nodes run"
    )
    parser.add_argument(
        "--baseline-src", type=Path, help="also time the one command with the distrain in this src"
    )
    parser.add_argument(
        "--light-shell",
        action="store_true",
        help="the hosts' bash skips ~/.bashrc (sshd sets SHLVL=1), as a host whose ~/.bashrc "
        "returns at once for non-interactive shells (Debian's default one does)",
    )
    args = parser.parse_args()
    if args.baseline_src is not None:
        compare(args)
        return
    load0 = os.getloadavg()[0]
    with (
        tempfile.TemporaryDirectory() as tmp,
        ssh_cluster(2, Path(tmp), sshd_opts=_sshd_opts(args)) as c,
    ):
        if args.parts:
            print(f"# load {load0:.1f} before")
            parts(c)
            print(f"# load {os.getloadavg()[0]:.1f} after")
            return
        work = Path(tmp)
        one: list[tuple[float, float, float]] = []
        two: list[tuple[float, float, float]] = []
        only = args.start_only
        for r in range(args.rounds):
            if r % 2:
                one.append(one_command(c, work, only))
                two.append(two_commands(c, work, 29600 + r, only))
            else:
                two.append(two_commands(c, work, 29600 + r, only))
                one.append(one_command(c, work, only))
            step = "" if only else f"; first step after {one[-1][2]:.2f} s / {two[-1][2]:.2f} s"
            print(f"round {r}: nodes running after {one[-1][0]:.2f} s (one command) / "
                  f"{two[-1][0]:.2f} s (two); "
                  f"both ranks running after {one[-1][1]:.2f} s / {two[-1][1]:.2f} s{step}",
                  flush=True)  # fmt: skip
    print(f"# load {load0:.1f} before, {os.getloadavg()[0]:.1f} after; rounds {args.rounds}")
    ends = ("start -> every host's distrain run running",
            "start -> both ranks running (rendezvous done)",
            "start -> last rank's first step")  # fmt: skip
    for k, what in enumerate(ends[:2] if only else ends):
        a, b = [x[k] for x in one], [x[k] for x in two]
        diffs = [x - y for x, y in zip(a, b, strict=True)]
        print(f"{what}: one command (--hosts) {statistics.median(a):.2f} s, two commands "
              f"{statistics.median(b):.2f} s, "
              f"difference median {statistics.median(diffs):+.2f} s (per round: "
              f"{', '.join(f'{d:+.2f}' for d in diffs)})")  # fmt: skip


def _sshd_opts(args: argparse.Namespace) -> tuple[str, ...]:
    # bash sources ~/.bashrc for a command run by sshd only at shell level 1 (SHLVL unset or 0)
    return ("-o", "SetEnv=SHLVL=1") if args.light_shell else ()


def compare(args: argparse.Namespace) -> None:
    """--start-only rounds of three forms in rotating order: this checkout's one command, the
    baseline src's one command, two commands."""
    load0 = os.getloadavg()[0]
    took: dict[str, list[float]] = {
        "one command": [],
        "one command, baseline src": [],
        "two commands": [],
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        ssh_cluster(2, Path(tmp), sshd_opts=_sshd_opts(args)) as c,
    ):
        work = Path(tmp)
        forms = {
            "one command": lambda r: one_command(c, work, True),
            "one command, baseline src": lambda r: one_command(c, work, True, args.baseline_src),
            "two commands": lambda r: two_commands(c, work, 29600 + r, True),
        }
        names = list(forms)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                took[name].append(forms[name](r)[1])
            print(
                f"round {r}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in took.items()),
                flush=True,
            )
    print(
        f"# load {load0:.1f} before, {os.getloadavg()[0]:.1f} after; rounds {args.rounds}; "
        f"baseline {args.baseline_src}"
    )
    base = took["one command, baseline src"]
    for name, values in took.items():
        diffs = [x - y for x, y in zip(values, base, strict=True)]
        print(f"start -> both ranks running: {name} median {statistics.median(values):.2f} s, "
              f"vs baseline src median {statistics.median(diffs):+.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
