"""The `distrain` command: run, and the tools around it.

Subcommands parse their own arguments (``distrain run`` must pass script arguments through
untouched, so no top-level parser looks at them): the first word only is read here
(:func:`first_word_is`).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from distrain import __version__

#: subcommand → (module, one-line help); each module has main(argv) -> int
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("distrain.launch.cli", "launch a training script on N processes / GPUs / nodes"),
    "doctor": (
        "distrain.tools.doctor.cli",
        "check this machine (and every rank) and explain what is wrong",
    ),
    "bench": (
        "distrain.tools.bench.cli",
        "benchmarks: comm (collective bandwidth), scaling (1 vs N processes)",
    ),
    "top": ("distrain.tools.top.cli", "live per-rank view of a job from its run directory"),
    "export": (
        "distrain.tools.export.cli",
        "generate a Dockerfile, compose file, SLURM script or Kubernetes job",
    ),
}

#: commands that run until stopped and promise to stop on Ctrl-C (SIGINT): `run`, `top`
STOP_ON_CTRL_C = frozenset({"run", "top"})

USAGE = "usage: distrain {" + ",".join(COMMANDS) + "} ..."


def _print_help() -> None:
    print(USAGE)
    print(
        "\nTake a PyTorch training script from one device to many processes, GPUs and machines.\n"
    )
    for name, (_, text) in COMMANDS.items():
        print(f"  {name:<8} {text}")
    print("\nRun 'distrain <command> --help' for a command's options.")


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; returns (and exits with) its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or first_word_is(args, "-h", "--help"):
        _print_help()
        return 0 if args else 2
    if first_word_is(args, "--version"):
        print(f"distrain {__version__}")
        return 0
    name = args[0]
    if name not in COMMANDS:
        print(
            f"distrain: error: unknown command {name!r} (choose from {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return 2
    if name in STOP_ON_CTRL_C:
        stop_on_ctrl_c()
    return run_subcommand(COMMANDS[name][0], args[1:])


def first_word_is(args: list[str], *switch: str) -> bool:
    """True when the first word of `args` is this switch (``-h``, ``--help``: its spellings) as
    argparse reads a leading switch: in full, no value attached; the words after it are the
    subcommand's, never read here."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument(*switch, dest="given", action="store_true")
    try:
        given, _ = parser.parse_known_args(args[:1])
    except argparse.ArgumentError:  # ``--help=1``, ``-hx``: a name no command has
        return False
    return bool(given.given)


def run_subcommand(module: str, argv: list[str]) -> int:
    """Run `module`'s ``main(argv)``; returns its exit code.

    A process the subcommand forks that must not keep the subcommand's frames raises out to here
    with a ``continue_at_entry`` (the fast start's fork server, whose workers would otherwise
    keep the launcher's code alive: launch/fast_start/server_fork.py), and goes on from here.
    """
    try:
        # no name here holds the module: a frame of this function may outlive it (below)
        return int(importlib.import_module(module).main(argv) or 0)
    except BaseException as err:
        go_on: Callable[[], NoReturn] | None = getattr(err, "continue_at_entry", None)
        if go_on is None:
            raise
        err.__traceback__ = err.__context__ = None  # the frames between here and the fork
    go_on()


def stop_on_ctrl_c() -> None:
    """Let SIGINT raise KeyboardInterrupt again where the parent left it ignored.

    A shell without job control starts a background job (``cmd &`` in a script, CI runners,
    ``nohup … &`` wrappers) with SIGINT ignored, and Python keeps an inherited ``SIG_IGN``: such
    a `distrain top` could not be stopped by SIGINT at all (issue 47).  torchrun's agent, too,
    handles SIGINT whatever it inherited, once its workers run.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def entry_point() -> None:
    """Console-script wrapper: exit with main()'s code (`run`: at once, see `end_now`)."""
    code = main()
    if sys.argv[1:2] == ["run"]:
        end_now(code)
    raise SystemExit(code)


def end_now(code: int) -> NoReturn:
    """Exit with `code` once the exit handlers ran and the output is flushed, skipping the
    interpreter's teardown.

    A launcher that ran torch's agent holds ~200 000 objects: after a job's end lines the
    interpreter's last collection and module teardown (torch's operator registrations undone one
    by one) took a median 2.9 s on 2 cores at load 11-17, and whatever runs next (the user's
    rerun, a script's next command) waited for it (benchmarks/chaos/RESULTS.md, "The launcher's
    exit"). The exit handlers still run (multiprocessing's children and temp folder,
    logging's flush, weakref finalizers); with a non-daemon thread still running, which Python
    would wait for, the ordinary exit is taken.
    """
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said there
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    entry_point()
