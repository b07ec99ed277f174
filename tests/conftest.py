"""Fixtures and the environment every test starts with; the helpers are in tests/helpers/.

Both layers run under it: tests/unit/ (in-process, fast) and tests/jobs/ (real multi-process
jobs, which import ``from helpers import run, python, REPO, ...``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # `import helpers` from tests/jobs/ whatever pytest's import mode
    sys.path.insert(0, str(TESTS))
from helpers import compat, cpu_log, leaks  # noqa: E402
from helpers.paths import REPO, SRC  # noqa: E402

# Subprocesses (launchers and their workers) must import this checkout's distrain.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), str(TESTS)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
)
# The suite tests the CPU/gloo paths (CI has no GPU); on a GPU machine they must stay on CPU.
# tests/jobs/test_gpu.py clears this to exercise CUDA + NCCL.
os.environ.setdefault("DISTRAIN_DEVICE", "cpu")
# torchrun warns about this for every job; the tests pin it explicitly where it matters.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


@pytest.fixture(autouse=True)
def _no_leaks() -> Iterator[None]:
    """Start each test without launcher variables; fail it if it leaves a variable, a thread or a
    process group behind (tests/helpers/leaks.py), after cleaning them up."""
    yield from leaks.guard()


def pytest_configure(config: pytest.Config) -> None:
    """The ``compat`` marker: the cell of docs/compatibility.md a test proves.

    Mark a test with ``helpers.compat.compat(mode, idiom, outcome, why=...)`` (modes and idioms:
    the keys of ``MODES`` and ``IDIOMS`` there; the idiom scripts: tests/scripts/idioms/, run
    with ``helpers.compat.run_idiom``), then ``python3 scripts/compat_table.py`` rewrites the
    table from the results."""
    config.addinivalue_line(
        "markers", "compat(mode, idiom, outcome, why): the modes × idioms cell this test proves"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Record the compat cells a test proves, when asked (scripts/compat_table.py)."""
    report = yield
    compat.record(item, report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Each test's wall and CPU seconds when ``DTEST_CPU_LOG`` asks (helpers/cpu_log)."""
    with cpu_log.recorded(item.nodeid):
        return (yield)


@pytest.fixture
def repo() -> Path:
    """The repository root."""
    return REPO


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked ``slow`` run first, each file's tests still together.

    Under ``-n 2`` the long jobs then start while short tests can still fill the other worker,
    instead of one worker finishing the suite alone (longest first keeps both cores busy to the
    end); keeping a file together keeps its module-scoped fixtures (shared baseline runs) alive
    between its tests."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: collection order otherwise


@pytest.fixture
def writes_environ() -> Iterator[None]:
    """For a test of code that exports variables on purpose (export_env, init, torch's compile
    cache): what it wrote is removed after the test instead of failing it as a leak."""
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)
