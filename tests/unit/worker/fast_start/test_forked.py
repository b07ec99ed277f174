"""worker/fast_start/forked.py: which failures of a forked worker deserve a fresh interpreter."""

from __future__ import annotations

import pytest

from distrain.worker.fast_start.forked import fork_may_be_the_cause


@pytest.mark.parametrize(
    "exc",
    [
        ModuleNotFoundError("No module named 'tqdm'"),
        SyntaxError("invalid syntax"),
        ValueError("bad --data"),
        KeyError("lr"),
        FileNotFoundError("data.csv"),
        NameError("x"),
    ],
)
def test_the_scripts_own_mistakes_are_not_rerun(exc: BaseException) -> None:
    assert not fork_may_be_the_cause(exc)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("this script must be started in a fresh interpreter"),
        RuntimeError("Cannot re-initialize CUDA in forked subprocess"),
        OSError("bad file descriptor"),
    ],
)
def test_what_a_fork_can_cause_is_rerun(exc: BaseException) -> None:
    assert fork_may_be_the_cause(exc)


def test_the_scripts_own_childrens_failures_are_not_rerun() -> None:
    import multiprocessing.pool

    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

    assert not fork_may_be_the_cause(ProcessRaisedException("\n\n-- Process 1 …", 1, 4242))
    assert not fork_may_be_the_cause(ProcessExitedException("process 1 exited", 1, 4242, 1))
    pooled = RuntimeError("raised in a Pool task")
    pooled.__cause__ = multiprocessing.pool.RemoteTraceback("Traceback …")
    assert not fork_may_be_the_cause(pooled)
