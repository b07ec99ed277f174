"""The `distrain run` command line, taken apart once: launcher options, the script, its arguments.

One parser knows every option `distrain run` takes: torchrun's own
(``torch.distributed.run.get_args_parser``) and distrain's, registered once
(launch/options/run_options.py: the features' options too).
:func:`split` cuts a command line at the script with that parser's own table of options (which
take a value, which are switches), so ``train.py --n 5`` never reaches argparse's prefix
matching; a launcher option abbreviated as torchrun allows (``--max-restart``) is expanded here
once, by argparse's rule (launch/options/option_names.py).  Every caller takes its command line
apart here and selects options by the parser's ``dest``, so each spelling of an option
(``--max-restarts``, ``--max_restarts``) is known once: the plan, the features (launch/seam.py),
and the tools that relaunch themselves (split with their own parser).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from distrain.errors import UsageError, raise_usage_errors
from distrain.launch.options import option_names
from distrain.launch.options.run_options import EPILOG, add_run_options

PROG = "distrain run"
#: the dest of a token that names no option of the parser
UNKNOWN = ""
#: the dest of a tool's own positional before the script (:func:`split`'s `leading`)
POSITIONAL = "<positional>"


@dataclass(frozen=True)
class Option:
    """One option as given: its name, the parser's dest for it, its value and its tokens."""

    name: str
    dest: str
    #: None for a switch, or for a value missing at the end of the command line
    value: str | None
    tokens: tuple[str, ...]
    #: the option takes a value (a None value then means it is missing)
    takes_value: bool = False
    #: an unknown name only: the options it abbreviates (two or more: ambiguous), or the one
    #: nearest in spelling (launch/options/option_names.py)
    could_be: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandLine:
    """A command line split at the script: the options before it, then [script, *script args]."""

    options: tuple[Option, ...] = ()
    script_argv: tuple[str, ...] = ()
    #: the script's part came after ``--`` (a tool whose script arguments must follow one)
    separated: bool = False

    @property
    def launcher_argv(self) -> list[str]:
        """The launcher's tokens, as given."""
        return [tok for opt in self.options for tok in opt.tokens]

    @property
    def script(self) -> str | None:
        """The training script (a path, or a module with -m), or None when none was given."""
        return self.script_argv[0] if self.script_argv else None

    @property
    def script_args(self) -> list[str]:
        """The script's own arguments."""
        return list(self.script_argv[1:])

    @property
    def unknown(self) -> list[str]:
        """Names before the script that no option of the parser has."""
        return [opt.name for opt in self.options if opt.dest == UNKNOWN]

    def refuse_unknown(self) -> None:
        """UsageError naming the first unknown option, if any, with the option meant."""
        first = next((opt for opt in self.options if opt.dest == UNKNOWN), None)
        if first is None:
            return
        if len(first.could_be) > 1:  # argparse's words, as torchrun says it
            raise UsageError(
                f"ambiguous option: {first.name} could match {', '.join(first.could_be)}"
            )
        meant = f": did you mean {first.could_be[0]}?" if first.could_be else ""
        raise UsageError(
            f"unknown option {first.name}{meant} "
            "(see distrain run --help; script options go after the script)"
        )

    def has(self, *dests: str) -> bool:
        """True when an option with one of these dests was given."""
        return any(opt.dest in dests for opt in self.options)

    def given(self, *dests: str) -> list[Option]:
        """The options with these dests, in the order given."""
        return [opt for opt in self.options if opt.dest in dests]

    def value(self, dest: str) -> str | None:
        """The last value given to the option `dest` (None when not given)."""
        found = [opt.value for opt in self.options if opt.dest == dest]
        return found[-1] if found else None

    def launcher_without(self, *dests: str) -> list[str]:
        """The launcher's tokens without the options of these dests."""
        return [tok for opt in self.options if opt.dest not in dests for tok in opt.tokens]

    def with_values(self, fill: Callable[[Option], str | None]) -> CommandLine:
        """This command line with each option's value as `fill(option)` gives it, tokens rebuilt
        in the form given (``--name=value`` or ``--name value``)."""
        options = []
        for opt in self.options:
            value = fill(opt)
            if value == opt.value or value is None:
                options.append(opt)
                continue
            tokens = (f"{opt.name}={value}",) if len(opt.tokens) == 1 else (opt.name, value)
            options.append(replace(opt, value=value, tokens=tokens))
        return replace(self, options=tuple(options))

    def argv_without(self, *dests: str) -> list[str]:
        """The whole command line without the options of these dests (``--`` kept where needed)."""
        return self.launcher_without(*dests) + script_tail(list(self.script_argv))


def script_tail(script_argv: list[str]) -> list[str]:
    """[script, *args] for a command line: after ``--`` when the script looks like an option."""
    return ["--", *script_argv] if script_argv and script_argv[0].startswith("-") else script_argv


def any_option(args: Sequence[str]) -> bool:
    """True when a word of `args` looks like an option to argparse (a leading dash): torchrun's
    parser then needs a ``--`` before them (it prefix-matches them against its own)."""
    return any(arg.startswith("-") for arg in args)


def option_values(args: Sequence[str], wanted: Callable[[str], bool]) -> list[str]:
    """The values given to the options whose names `wanted` accepts, anywhere in `args` (a
    script's own line, whose parser we do not have), each once: ``--name=value``, or ``--name
    value`` when the value does not look like an option."""
    found: list[str] = []
    for i, tok in enumerate(args):
        name, eq, value = tok.partition("=")
        if not wanted(name):
            continue
        if not eq:
            after = args[i + 1 : i + 2]
            value = after[0] if after and not after[0].startswith("-") else ""
        if value and value not in found:
            found.append(value)
    return found


def split(
    argv: Sequence[str], parser: argparse.ArgumentParser | None = None, leading: int = 0
) -> CommandLine:
    """Split `argv` at the first token that is not an option (or at ``--``, which is dropped).

    `parser` defaults to `distrain run`'s (:func:`run_parser`); a tool splits its own command
    line with its own parser (`distrain export slurm train.py … -- --lr 1`: `leading` 2 keeps
    its positionals, target and script, on its side).  An unknown name is kept as a switch with
    the dest UNKNOWN: the caller decides when to refuse it (``--help`` is still seen after it).
    `distrain run` takes torchrun's abbreviations (``--max-restart``: argparse's allow_abbrev,
    as torchrun's parser does), given on as the full name; a tool's parser says whether it does.
    """
    if parser is None:
        return _split(argv, takes_value(run_parser()), leading, abbrev=True)
    return _split(argv, takes_value(parser), leading, abbrev=parser.allow_abbrev)


def read_command_line(argv: Sequence[str]) -> CommandLine:
    """`distrain run`'s command line, split once: on the recorded torchrun table when it is the
    installed torch's (no ``import torch`` for a usage error), else on torch's own parser.
    UsageError for a name no option has, unless ``--help`` is asked (help wins)."""
    parser = parser_without_torch() or run_parser()
    command = _split(argv, takes_value(parser), abbrev=True)
    if not command.has("help"):
        command.refuse_unknown()
    return command


def split_without_torch(argv: Sequence[str]) -> CommandLine | None:
    """:func:`split` on :func:`parser_without_torch`'s table (no ``import torch``); None when
    the installed torch is not the one the recorded table comes from."""
    parser = parser_without_torch()
    return None if parser is None else _split(argv, takes_value(parser), abbrev=True)


def parser_without_torch() -> argparse.ArgumentParser | None:
    """:func:`run_parser` built from torchrun's options as recorded in
    launch/options/torchrun_options.py (names, values' types and choices): the same table and the
    same error messages without ``import torch``.  None when the installed torch is not the one
    they were recorded from; its help is torch's parser's (``--help`` goes there)."""
    from distrain.launch.options.torch_version import torch_versions
    from distrain.launch.options.torchrun_options import OPTIONS, TORCH_VERSION, VALUES

    version, _ = torch_versions()
    if version is None or version.split("+")[0] != TORCH_VERSION:
        return None
    parser = argparse.ArgumentParser(prog=PROG, add_help=False)
    names: dict[str, list[str]] = {}
    for name, (dest, _) in OPTIONS.items():  # in torch's order: an ambiguity lists it so
        names.setdefault(dest, []).append(name)
    for dest, spellings in names.items():
        if not OPTIONS[spellings[0]][1]:
            parser.add_argument(*spellings, dest=dest, action="store_true")
            continue
        kind, choices = VALUES.get(dest, ("str", ()))
        convert = {"int": int, "float": float}.get(kind, str)
        parser.add_argument(*spellings, dest=dest, type=convert, choices=choices or None)
    parser.add_argument("training_script")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return _distrain_options(parser)


def _split(
    argv: Sequence[str], table: dict[str, tuple[str, bool]], leading: int = 0, abbrev: bool = False
) -> CommandLine:
    options: list[Option] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return CommandLine(tuple(options), tuple(argv[i + 1 :]), separated=True)
        if not tok.startswith("-") or tok == "-":
            if not leading:
                return CommandLine(tuple(options), tuple(argv[i:]))
            options.append(Option(tok, POSITIONAL, tok, (tok,)))  # the tool's own positional
            leading, i = leading - 1, i + 1
            continue
        name, eq, attached = tok.partition("=")
        could_be: tuple[str, ...] = ()
        if name not in table and abbrev:
            full, could_be = option_names.expand(name, table)
            if full is not None:  # given on in full: no parser after this one abbreviates
                name, tok = full, f"{full}{eq}{attached}"
        if name not in table and not could_be:
            meant = option_names.nearest(name, table)
            could_be = (meant,) if meant else ()
        dest, needs_value = table.get(name, (UNKNOWN, False))
        if eq or not needs_value:
            value = attached if eq else None
            options.append(Option(name, dest, value, (tok,), needs_value, could_be))
            i += 1
        elif i + 1 < len(argv):
            options.append(Option(name, dest, argv[i + 1], (tok, argv[i + 1]), True))
            i += 2
        else:  # the value is missing: the parser says so in its own words
            options.append(Option(name, dest, None, (tok,), True))
            i += 1
    return CommandLine(tuple(options), ())


def takes_value(parser: argparse.ArgumentParser) -> dict[str, tuple[str, bool]]:
    """Every option name of `parser` → (its dest, whether it takes a value)."""
    return {
        name: (action.dest, action.nargs != 0)
        for action in parser._actions
        for name in action.option_strings
    }


def run_parser() -> argparse.ArgumentParser:
    """`distrain run`'s parser: torchrun's, with distrain's options added."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.description = "Launch a training script on N processes (torchrun's flags accepted)."
    parser.epilog = EPILOG
    return _distrain_options(parser)


def _distrain_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """torchrun's `parser` made `distrain run`'s: distrain's options added
    (launch/options/run_options.py), errors raised as UsageError; it never abbreviates (split
    did, by the same rule)."""
    parser.prog = PROG
    parser.allow_abbrev = False
    add_run_options(parser)
    raise_usage_errors(parser)
    _forward_usr1(parser)
    return parser


def _forward_usr1(parser: argparse.ArgumentParser) -> None:
    """Handle and forward SIGUSR1 too: SLURM's time-limit warning (`sbatch --signal=USR1@N`).

    Unhandled, SIGUSR1 kills the agent outright and orphans the workers; handled, the agent
    passes it on and waits for them to checkpoint (process/signals.py), as it does for SIGTERM.
    """
    for action in parser._actions:
        if action.dest == "signals_to_handle" and "SIGUSR1" not in str(action.default).split(","):
            action.default = f"{action.default},SIGUSR1"
