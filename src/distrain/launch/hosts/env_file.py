"""Environment files for `distrain run --hosts`: NAME=VALUE lines exported on every host.

As DeepSpeed's runner does with ``.deepspeed_env``: the launching machine reads the files in the
home directory, then in the working directory, and every host's node gets the variables.  Both
names are read, so a DeepSpeed user's file keeps working:

    ~/.deepspeed_env, ~/.distrain_env, ./.deepspeed_env, ./.distrain_env

a later file overriding an earlier one, and ``-x NAME=VALUE`` on the command line overriding
them all.  Lines are ``NAME=VALUE``; blank lines and lines starting with ``#`` are skipped; an
``export`` before the name is allowed, and one pair of quotes around the value is removed (the
value a shell would give ``NAME="a b"``; nothing else is expanded).  Anything else is an error
naming the file and line.
"""

from __future__ import annotations

import os

from distrain.errors import UsageError

#: the file names read, DeepSpeed's first: distrain's own wins where both set a variable
NAMES = (".deepspeed_env", ".distrain_env")


def paths(cwd: str, home: str) -> list[str]:
    """The files read, in order (later ones override earlier ones)."""
    folders = [home] if os.path.realpath(home) == os.path.realpath(cwd) else [home, cwd]
    return [os.path.join(folder, name) for folder in folders for name in NAMES]


def parse(text: str, where: str) -> dict[str, str]:
    """The variables of one file's text; UsageError naming `where` and the line on a bad line."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        body = line[len("export ") :].lstrip() if line.startswith("export ") else line
        name, sep, value = body.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"{where}:{number}: {raw.strip()!r} is not NAME=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name] = value
    return out


def load(cwd: str | None = None, home: str | None = None) -> tuple[dict[str, str], list[str]]:
    """(the variables of every file found, the files found, in order)."""
    cwd = os.getcwd() if cwd is None else cwd
    home = os.path.expanduser("~") if home is None else home
    found: dict[str, str] = {}
    used = []
    for path in paths(cwd, home):
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(f"{path}: cannot be read ({err})") from None
        found.update(parse(text, path))
        used.append(path)
    return found, used
