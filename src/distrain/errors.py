"""One-line errors for the command line: a message and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, TypeVar


class DistrainError(RuntimeError):
    """The base of distrain's errors; raised as such, a set-up problem in a worker with a one-line
    explanation (printed without a traceback).

    A subclass that sets :attr:`one_line` False (UsageError, ClusterError, `distrain top`'s
    NoJobError) keeps its traceback: a worker's excepthook shortens only the others to a line.
    """

    #: a worker's uncaught error of this class is one ``distrain: error:`` line, no traceback
    one_line: bool = True

    #: True when a restart would fail the same way (a checkpoint refused, bad input): under
    #: `distrain run` the job then stops at once instead of spending its restarts on it
    recurs: bool = False


E = TypeVar("E", bound=DistrainError)


def recurring(err: E) -> E:
    """Mark `err` as one that every restart would meet again (see DistrainError.recurs)."""
    err.recurs = True
    return err


class Abandoned(DistrainError):
    """A part gave up on work a restart redoes (a save whose writer died); it does not exit itself.

    The worker's lifecycle (:func:`distrain.worker.lifecycle.failure.exit_abandoned`) prints
    :attr:`line` and ends the process with :attr:`exit_code`; uncaught, it is one
    ``distrain: error:`` line.
    """

    def __init__(self, message: str, exit_code: int, line: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        #: what the lifecycle prints before it exits (default: the message)
        self.line = message if line is None else line


class UsageError(DistrainError):
    """Bad input from the user; the CLI prints `distrain <cmd>: error: <message>` and exits 2."""

    recurs = True
    one_line = False

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def fail(prog: str, message: str, exit_code: int = 2) -> NoReturn:
    """Print one error line on stderr and exit."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(exit_code)


def raise_usage_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make `parser` raise UsageError instead of printing its usage block and exiting."""

    def error(message: str) -> NoReturn:
        raise UsageError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser
