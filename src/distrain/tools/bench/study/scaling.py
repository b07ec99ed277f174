"""`distrain bench scaling`: the same training at 1, 2, 4 … processes, and the report it makes.

    distrain bench scaling --nproc 1,2 --sync-bn both --epochs 5 --out bench-out
    distrain bench scaling --workload imagefolder --data flower_photos --nproc 1,2
    distrain bench scaling --nproc 1,2 my_train.py -- --lr 0.1    # your script, your flags

Each run is a real ``distrain run`` job, one process per device (on CPU one thread per process).
The script reports its progress with ``ctx.log(epoch=..., samples=...)`` every step and
``ctx.log(accuracy=...)`` after evaluating (:mod:`.runner`, docs/bench.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from distrain.errors import UsageError, fail, raise_usage_errors
from distrain.launch.command_line import split
from distrain.process.cores import usable_cores
from distrain.tools.bench.study import nodes, probe, report, runner, summary
from distrain.tools.bench.study.plan import plan_runs

PROG = "distrain bench scaling"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
#: the bench's own workload script: examples/train_digits.py's training, every step timed
WORKLOAD = Path(__file__).resolve().with_name("workload.py")
#: built-in workloads: name → (script, its arguments, what one step computes)
WORKLOADS: dict[str, tuple[str, list[str], str]] = {
    # compute-bound: the image size is chosen by a probe on this machine (study/probe.py), so
    # a step takes ~TARGET_STEP_S and the small all-reduce (0.15 M parameters) stays small beside it
    "cnn": (
        str(WORKLOAD),
        [],
        "digits upsampled, 2-conv CNN, 32 samples per process and step, 0.15 M parameters",
    ),
    # latency-bound: 0.23 s epochs, the all-reduce of every step dominates (shows the overhead)
    "digits": (
        str(WORKLOAD),
        ["--image-size", "8"],
        "8×8 digits, 2-conv CNN: 7.9 MFLOP per sample (forward + backward), 0.25 GFLOP per step "
        "of 32 samples per process, 0.15 M parameters",
    ),
    "imagefolder": (
        str(EXAMPLES / "train_imagefolder.py"),
        [],
        "your image folder on a torchvision ResNet",
    ),
}


def _advance(progress: Any, task: Any, epochs_done: int) -> None:
    progress.update(task, completed=epochs_done)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Run the same training at several process counts and write a "
        "report with charts.",
        epilog="Script options go after '--'. The script must call ctx.log(epoch=..., samples=...) "
        "every step (docs/bench.md).",
    )
    p.add_argument(
        "script", nargs="?", help="your training script (default: the built-in --workload)"
    )
    p.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="cnn",
        help="built-in workload when no script is given: cnn (compute-bound, default), digits "
        "(all-reduce-bound), imagefolder",
    )
    p.add_argument("--data", help="image folder (class subfolders) for --workload imagefolder")
    p.add_argument(
        "--nproc", default="1,2,4", help="comma-separated process counts (default 1,2,4)"
    )
    p.add_argument(
        "--sync-bn",
        choices=("off", "on", "both"),
        default="off",
        help="pass --sync-bn to the script for N > 1: never, always, or both ways",
    )
    p.add_argument(
        "--epochs",
        type=int,
        help="passed to the script as --epochs N (built-in workloads: default 5)",
    )
    p.add_argument(
        "--batch-size", type=int, help="per-process batch, passed to the script as --batch-size N"
    )
    p.add_argument(
        "--step-target",
        type=float,
        default=probe.TARGET_STEP_S,
        help="--workload cnn: size the images so one step takes about this many seconds on this "
        f"machine (default {probe.TARGET_STEP_S}; 0: 32×32, no probe)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads per process (default 1: one process per core is the fair comparison)",
    )
    p.add_argument(
        "--no-all-cores", action="store_true", help="skip the '1 process, all cores' baseline row"
    )
    _run_options(p)
    nodes.add_arguments(p)

    raise_usage_errors(p)
    return p


def _run_options(p: argparse.ArgumentParser) -> None:
    """Where the runs go, how often, on what, and for how long."""
    p.add_argument(
        "--out", default="bench-out/scaling", help="output directory (default bench-out/scaling)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse finished runs already in --out (same command and settings)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every run, interleaved in time (medians are reported; default 1)",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="rehearse a CUDA/NCCL script on CPU processes (each run is distrain run --cpu)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=3600,
        help="seconds one run may take before it is killed and marked failed",
    )


def parse_nproc(text: str) -> list[int]:
    """'1,2,4' → [1, 2, 4] (sorted, unique); UsageError for anything but positive integers."""
    values = []
    for tok in text.split(","):
        tok = tok.strip()
        if not tok.isdigit() or int(tok) < 1:
            raise UsageError(f"--nproc expects positive integers like 1,2,4 (got {tok or text!r})")
        values.append(int(tok))
    return sorted(set(values))


def check_out_dir(out: Path) -> None:
    """Create `out` and prove it is writable, or raise UsageError saying why not."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write to --out {out}: {err.strerror or err}") from None


def resolve_script(
    args: argparse.Namespace, script_args: list[str], out: Path
) -> tuple[str, list[str], str]:
    """(script path, its arguments, workload label) after checking they exist."""
    extra = list(script_args)
    if args.script:
        script, label = args.script, Path(args.script).name
        if args.data:
            extra = ["--data", args.data] + extra
    else:
        script, builtin_args, compute = WORKLOADS[args.workload]
        label = f"{args.workload} ({compute})"
        extra = builtin_args + extra
        if args.workload == "imagefolder":
            if not args.data:
                raise UsageError(
                    "--workload imagefolder needs --data DIR (a folder of class subfolders)"
                )
            if not os.path.isdir(args.data):
                raise UsageError(f"--data {args.data}: not a directory")
            extra = ["--data", args.data] + extra
        if args.epochs is None:
            args.epochs = 5
    if not os.path.isfile(script):
        raise UsageError(f"script not found: {script}")
    if args.epochs is not None:
        if args.epochs < 1:
            raise UsageError(f"--epochs must be at least 1 (got {args.epochs})")
        extra += ["--epochs", str(args.epochs)]
    if args.batch_size is not None:
        if args.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1 (got {args.batch_size})")
        extra += ["--batch-size", str(args.batch_size)]
    return script, extra, label


def _gives_image_size(script_args: list[str]) -> bool:
    """The script's arguments give ``--image-size`` (``--image-size N``, ``--image-size=N``)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--image-size")
    try:
        given, _ = parser.parse_known_args(script_args)
    except argparse.ArgumentError:  # given without its value: the script says so itself
        return True
    return given.image_size is not None


def size_workload(
    args: argparse.Namespace, extra: list[str], label: str
) -> tuple[list[str], str, dict[str, Any] | None]:
    """(script arguments, label, sizing): the cnn workload's image size from this machine's probe.

    No probe for other workloads, with ``--step-target 0``, or when the script arguments
    already give ``--image-size``.
    """
    if args.script or args.workload != "cnn":
        return extra, label, None
    if args.step_target < 0:
        raise UsageError(f"--step-target must be 0 or more seconds (got {args.step_target})")
    if args.step_target == 0 or _gives_image_size(extra):
        return extra, label, None
    batch = args.batch_size or 32
    sizing = probe.size_cnn(args.step_target, batch, args.threads)
    size = sizing["image_size"]
    label = label.replace("digits upsampled", f"digits upsampled to {size}×{size}", 1).replace(
        "32 samples", f"{batch} samples", 1
    )
    return ["--image-size", str(size), *extra], label, sizing


def execute_all(
    specs: list[runner.RunSpec], out: Path, resume: bool, timeout: float, epochs: int | None
) -> list[dict[str, Any]]:
    """Run (or reuse) every spec with a rich progress display; returns the run dicts."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    results: list[dict[str, Any]] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        overall = progress.add_task("all runs", total=len(specs))
        for spec in specs:
            run_dir = out / "runs" / spec.name / f"round{spec.round}"
            saved = runner.reusable(spec, run_dir) if resume else None
            if saved is not None:
                progress.console.print(
                    f"{spec.name} round {spec.round}: reusing the finished run in {run_dir}"
                )
                results.append(saved)
                progress.advance(overall)
                continue
            task = progress.add_task(f"{spec.name} round {spec.round}: epochs", total=epochs)
            res = runner.execute(
                spec, run_dir, timeout, on_epoch=functools.partial(_advance, progress, task)
            )
            progress.remove_task(task)
            data = res.to_dict()
            (run_dir / "result.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
            took = f"{len(res.epochs)} epoch(s) in {res.wall_seconds:.1f} s"
            line = f"{spec.name} round {spec.round}: {res.status}, {took}"
            progress.console.print(line + (f" — {res.error}" if res.error else ""), markup=False)
            results.append(data)
            progress.advance(overall)
    return results


def main(argv: list[str]) -> int:
    """Entry point of `distrain bench scaling`; 0 when every run finished, 1 otherwise."""
    command = split(argv, _parser(), leading=1)  # the script; its arguments after ``--``
    own = command.launcher_argv if command.separated else argv  # else argparse refuses the rest
    script_args = list(command.script_argv) if command.separated else []
    try:
        args = _parser().parse_args(own)
        nprocs = parse_nproc(args.nproc)
        if args.repeat < 1:
            raise UsageError(f"--repeat must be at least 1 (got {args.repeat})")
        if args.threads < 1:
            raise UsageError(f"--threads must be at least 1 (got {args.threads})")
        out = Path(args.out)
        script, extra, label = resolve_script(args, script_args, out)
        label = nodes.describe(label, args)
        check_out_dir(out)
        extra, label, sizing = size_workload(args, extra, label)
    except UsageError as err:
        fail(PROG, str(err), err.exit_code)
    if max(nprocs) * args.threads > usable_cores():
        print(
            f"{PROG}: warning: {max(nprocs)} process(es) × {args.threads} thread(s) exceed the "
            f"{usable_cores()} usable cores; those runs time-share cores and cannot scale",
            file=sys.stderr,
        )
    try:
        load_start = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load_start = []
    specs = plan_runs(
        nprocs,
        args.sync_bn,
        script,
        extra,
        args.threads,
        out,
        builtin=not args.script,
        repeat=args.repeat,
        all_cores=0 if args.no_all_cores or args.cpu else usable_cores(),
    )
    if args.cpu:  # CUDA stands in on the CPU in every run (docs: README "Rehearse on CPU")
        for spec in specs:  # rounds share one command list: build a new one
            at = spec.command.index("run") + 1
            spec.command = [*spec.command[:at], "--cpu", *spec.command[at:]]
    specs = nodes.expand(specs, args)
    rounds = execute_all(specs, out, args.resume, args.timeout, args.epochs)
    results = summary.build_results(argv, label, rounds, args.threads, load_start)
    results["links"] = args.link_label
    if sizing is not None:
        results["sizing"] = {**sizing, "text": probe.describe(sizing)}
    (out / "results.json").write_text(
        json.dumps(summary.portable(results), indent=2), encoding="utf-8"
    )
    runs = results["configs"]
    base = next((r for r in runs if r["name"] == results["baseline"]), None)
    from distrain.tools.bench.study import plots

    plots.write_all(
        runs, base, out, device="cuda" if results["machine"]["cuda_available"] else "cpu"
    )
    path = report.write(results, out)
    print(report.table(runs))
    for text in results["interpretation"].values():
        print("- " + text)
    print(f"report: {path}")
    failed = [r["name"] for r in runs if r["status"] != "ok"]
    if failed:
        print(
            f"{PROG}: error: {len(failed)} run(s) failed ({', '.join(failed)}); see "
            f"{shlex.quote(str(path))}",
            file=sys.stderr,
        )
        return 1
    return 0
