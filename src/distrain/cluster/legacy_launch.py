"""`python -m torch.distributed.launch`, which passes `--local-rank=N` on the command line."""

from __future__ import annotations

import os
import re
import sys

from .torchelastic import TorchElasticEnvironment

_LOCAL_RANK_ARG = re.compile(r"^--local[-_]rank(?:=(\d+))?$")


def pop_local_rank_arg(argv: list[str]) -> int | None:
    """Remove `--local-rank=N`, `--local_rank=N` or `--local_rank N` from argv; return N."""
    for i, arg in enumerate(argv[1:], start=1):
        match = _LOCAL_RANK_ARG.match(arg)
        if not match:
            continue
        if match.group(1) is not None:
            del argv[i]
            return int(match.group(1))
        if i + 1 < len(argv) and argv[i + 1].isdigit():
            value = int(argv[i + 1])
            del argv[i : i + 2]
            return value
    return None


class LegacyLaunchEnvironment(TorchElasticEnvironment):
    """The deprecated launcher: local rank on argv (stripped so the user's argparse never sees it)."""

    name = "torch.distributed.launch"
    _argv_local_rank: int | None = None

    @classmethod
    def detect(cls) -> bool:
        """True when argv carries --local-rank/--local_rank (it is removed from sys.argv here)."""
        if cls._argv_local_rank is None:
            cls._argv_local_rank = pop_local_rank_arg(sys.argv)
        return cls._argv_local_rank is not None and "WORLD_SIZE" in os.environ

    def local_rank(self) -> int:
        """The value from argv; LOCAL_RANK when the launcher also exported it."""
        if self._argv_local_rank is not None:
            return self._argv_local_rank
        return super().local_rank()

    def export_env(self) -> None:
        """Also export LOCAL_RANK, which old launchers without --use-env did not set."""
        super().export_env()
        os.environ["LOCAL_RANK"] = str(self.local_rank())
