"""`python -m torch.distributed.launch`, which passes `--local-rank=N` on the command line."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from distrain.cluster.torchelastic import TorchElasticEnvironment


class _ArgvError(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting: argv is the script's."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def pop_local_rank_arg(argv: list[str]) -> int | None:
    """Remove `--local-rank=N`, `--local_rank=N` or `--local_rank N` from argv; return N.

    argparse reads it, as torch's own docs have scripts do; everything else stays in order.
    """
    parser = _ArgvError(add_help=False, allow_abbrev=False)
    parser.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int)
    try:
        found, rest = parser.parse_known_args(argv[1:])
    except ValueError:  # `--local_rank x`: the script's own option, not the launcher's
        return None
    if found.local_rank is None or found.local_rank < 0:
        return None
    argv[1:] = rest
    return int(found.local_rank)


def strip_launcher_argv() -> int | None:
    """Take the legacy launcher's `--local-rank=N` off sys.argv (once), before user argparse runs.

    Only inside a launched job (WORLD_SIZE set), so a single-process script's own option is
    left alone.  Called when distrain is imported; returns the local rank found, if any.
    """
    if LegacyLaunchEnvironment._argv_local_rank is None and "WORLD_SIZE" in os.environ:
        LegacyLaunchEnvironment._argv_local_rank = pop_local_rank_arg(sys.argv)
    return LegacyLaunchEnvironment._argv_local_rank


def forget_launcher_argv() -> None:
    """Forget the `--local-rank=N` taken off argv: the caller restored argv for the script."""
    LegacyLaunchEnvironment._argv_local_rank = None


class LegacyLaunchEnvironment(TorchElasticEnvironment):
    """The deprecated launcher: local rank on argv (stripped: the user's argparse never sees it)."""

    name = "torch.distributed.launch"
    _argv_local_rank: int | None = None

    @classmethod
    def detect(cls) -> bool:
        """True when argv carried --local-rank/--local_rank inside a launched job (now removed)."""
        return strip_launcher_argv() is not None

    def local_rank(self) -> int:
        """The value from argv; LOCAL_RANK when the launcher also exported it."""
        if self._argv_local_rank is not None:
            return self._argv_local_rank
        return super().local_rank()

    def export_env(self) -> None:
        """Also export LOCAL_RANK, which old launchers without --use-env did not set."""
        super().export_env()
        os.environ["LOCAL_RANK"] = str(self.local_rank())
