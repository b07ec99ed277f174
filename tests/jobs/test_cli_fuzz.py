"""Random and malformed argument lists for every subcommand: a one-line error or success, never a
traceback, never a hang.

In-process (fast): 250 seeded argument lists through ``distrain.cli.main``, with the step that
would start real work (a job, the doctor's checks, a benchmark) replaced by a marker, so what is
tested is the real parsing and validation.  Out of process: a sample of the malformed lists and
the known bad inputs, through the real ``distrain`` CLI.
"""

from __future__ import annotations

import contextlib
import io
import random
from pathlib import Path

import pytest
from helpers import REPO, python, run

import distrain.cli

SCRIPT = str(REPO / "examples" / "train_digits.py")
VALUES = [
    "",
    "0",
    "-1",
    "1",
    "2",
    "3",
    "x",
    "1:0",
    "0:0",
    "2:1",
    "1:2",
    "auto",
    "nan",
    "inf",
    "-5.5",
    "1e9",
    "a,b",
    "0,3",
    ",",
    "-",
    "--",
    "/nonexistent",
    "/tmp",
    "\u2603",
    "64M",
    "0B",
    "-8",
    "1.5",
]
HOSTS = ["127.0.0.1", "127.0.0.2"]  # never a name: a resolver lookup would leave this machine

#: subcommand → (fixed leading words, options with values, flags, positional candidates)
COMMANDS: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "run": (
        [],
        [
            "-n",
            "--nproc",
            "--nnodes",
            "--node-rank",
            "--max-restarts",
            "--master-port",
            "--gpus",
            "--watchdog",
            "--monitor-interval",
            "--start-method",
            "--launcher",
            "--rdzv-backend",
            "--rdzv-id",
            "--run-dir",
            "--iface",
            "--nproc-per-node",
        ],
        ["--dry-run", "--standalone", "--legacy-local-rank", "-m", "--no-python"],
        [SCRIPT, "/tmp", "missing.py"],
    ),
    "doctor": (
        [],
        ["-n", "--nproc", "--master-port", "--ports", "--timeout", "--bandwidth-bytes"],
        ["--json", "--expect-gpu", "--local"],
        [],
    ),
    "bench-comm": (
        ["comm"],
        [
            "-n",
            "--nproc",
            "--ops",
            "-b",
            "-e",
            "-f",
            "-w",
            "-i",
            "--dtype",
            "--backend",
            "--device",
        ],
        ["--no-check", "--json"],
        [],
    ),
    "bench-scaling": (
        ["scaling"],
        [
            "--workload",
            "--nproc",
            "--sync-bn",
            "--epochs",
            "--batch-size",
            "--threads",
            "--repeat",
            "--timeout",
            "--data",
        ],
        ["--resume"],
        [SCRIPT, "/tmp"],
    ),
    "export": (
        [],
        [
            "--nnodes",
            "--nproc-per-node",
            "--gpus-per-node",
            "--port",
            "--max-restarts",
            "--cpus-per-node",
            "--name",
            "--image",
        ],
        [],
        ["docker", "slurm", "k8s", "compose", "nope", SCRIPT],
    ),
    "top": (
        [],
        ["--refresh", "--stall-after", "--straggler-ratio", "--window"],
        ["--once", "--json"],
        ["/nonexistent", "/tmp"],
    ),
}


def _argv(rng: random.Random, name: str) -> list[str]:
    lead, options, flags, positionals = COMMANDS[name]
    words = list(lead)
    for _ in range(rng.randint(0, 4)):
        kind = rng.random()
        if kind < 0.55:
            opt = rng.choice(options)
            value = rng.choice(HOSTS if "addr" in opt else VALUES)
            words += [f"{opt}={value}"] if rng.random() < 0.2 else [opt, value]
        elif kind < 0.7 and flags:
            words.append(rng.choice(flags))
        elif kind < 0.8:
            words.append(rng.choice(["--frobnicate", "-z", "--nproc=", "--", "---", "-"]))
        elif kind < 0.85:
            words.append(rng.choice(options))  # an option missing its value
        else:
            words.append(rng.choice(positionals or VALUES))
    if positionals and rng.random() < 0.7:
        words += rng.sample(positionals, k=min(len(positionals), rng.randint(1, 2)))
    if rng.random() < 0.3:
        words += rng.sample(VALUES, k=2)  # stray words (script arguments, for run)
    return ["bench" if name.startswith("bench") else name, *words]


class _Started(Exception):
    """The command got past its checks and would now start real work."""


def _start(*_args: object, **_kwargs: object) -> object:
    raise _Started


@pytest.fixture
def no_real_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import distrain.launch.cli
    import distrain.launch.fast_start.forkserver
    import distrain.launch.relaunch
    import distrain.tools.bench.study.scaling
    import distrain.tools.doctor.cli

    monkeypatch.setattr(distrain.launch.fast_start.forkserver, "early_start", lambda argv: False)
    monkeypatch.setattr(distrain.launch.cli, "_launch", _start)
    monkeypatch.setattr(distrain.launch.relaunch, "relaunch", _start)
    monkeypatch.setattr(distrain.tools.doctor.cli, "run_checks", _start)
    monkeypatch.setattr(distrain.tools.bench.study.scaling, "plan_runs", _start)
    monkeypatch.chdir(tmp_path)  # export --out, bench --out: relative paths land here


def _call(argv: list[str]) -> tuple[int | str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = distrain.cli.main(argv)
        except _Started:
            code = "started"
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def _one_line_error(stderr: str) -> bool:
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "warning:" not in ln]
    return len(lines) == 1 and "error" in lines[0] and lines[0].startswith("distrain")


@pytest.mark.timeout(600)
def test_random_arguments_in_process(no_real_work: None, writes_environ: None) -> None:
    rng = random.Random(20261123)
    seen: dict[str, int] = {}
    bad: list[str] = []
    for i in range(250):
        name = list(COMMANDS)[i % len(COMMANDS)]
        argv = _argv(rng, name)
        try:
            code, out, err = _call(argv)
        except Exception as exc:  # a traceback in the real CLI
            bad.append(f"{argv}: {type(exc).__name__}: {exc}")
            continue
        outcome = "started" if code == "started" else ("ok" if code == 0 else "error")
        seen[outcome] = seen.get(outcome, 0) + 1
        if outcome == "error" and not _one_line_error(err):
            bad.append(f"{argv}: exit {code}, stderr {err!r}")
        if "Traceback" in out + err:
            bad.append(f"{argv}: traceback printed: {err[-500:]!r}")
    assert not bad, "\n".join(bad[:20])
    assert seen.get("error", 0) >= 150, seen  # mostly malformed, as intended


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--nnodes", "0", "-n", "2", SCRIPT], "--nnodes 0"),
        (["run", "--max-restarts", "-1", "-n", "2", SCRIPT], "--max-restarts"),
        (["run", "-n", "2", "/tmp"], "is a directory"),
        (["run", "--nnodes", "2:1", SCRIPT], "--nnodes 2:1"),
        (["doctor", "--timeout", "x"], "--timeout"),
        (["bench", "comm", "-b", "-8"], "error"),
        (["bench", "scaling", "--nproc", "0"], "error"),
        (["export", "nope", SCRIPT], "error"),
        (["top", "/nonexistent", "--once"], "error"),
    ],
)
def test_bad_input_through_the_real_cli(tmp_path: Path, argv: list[str], needle: str) -> None:
    res = run([python(), "-m", "distrain.cli", *argv], timeout=180, cwd=tmp_path)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and "AssertionError" not in res.stderr, res.stderr[-2000:]
    assert _one_line_error(res.stderr), res.stderr[-2000:]
    assert needle in res.stderr, res.stderr
