"""Usage errors of `distrain run` before ``import torch``.

A typo used to wait for torch's parser, and so for ``import torch`` (3.7-8 s on a loaded 2-core
machine), before its one-line error.  An unknown or ambiguous option is refused where the command
line is read (command_line.read_command_line); :func:`check_before_torch` reads it with the
recorded torchrun table (command_line.parser_without_torch: the same options, types, choices and
messages as torch's parser) and refuses what needs nothing else: a missing value or script, a
value of the wrong type or choice, a bad ``-n``, a script that is not a file.  It reads the
options with the plan's own :func:`~distrain.launch.plan.parse_options`, so an error says the
same words before torch as after it.
"""

from __future__ import annotations

from distrain.launch.command_line import CommandLine, parser_without_torch
from distrain.launch.options.validate import at_least_one, check_script, nproc_number
from distrain.launch.plan import parse_options


def check_before_torch(command: CommandLine) -> None:
    """UsageError for what is wrong with `command` that shows without torch or the machine
    (what plan.plan would refuse, in its words); nothing when the installed torch is not the
    recorded one or ``--help`` was asked (torch's parser prints it)."""
    parser = parser_without_torch()
    if parser is None or command.has("help"):
        return
    parsed = parse_options(command, parser)
    if parsed.nproc is not None and parsed.gpus is None:  # with --gpus: the GPUs decide first
        count = nproc_number(str(parsed.nproc))
        if count is not None:
            at_least_one(count)
    if not (parsed.module or parsed.no_python):
        check_script(parsed.training_script)
