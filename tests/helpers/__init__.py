"""What the real-process tests (tests/jobs/) share: ``from helpers import run, python, REPO, ...``.

- ``helpers.paths``: REPO, SRC, TESTS, EXAMPLES, SCRIPTS (the job scripts the tests launch);
- ``helpers.processes``: run a command with a hard time bound (``distrain_run``: a job of
  ``distrain run``, the one launcher helper of the job tests), kill a launcher's whole tree,
  hold a port a test names to a job (``held_port``);
- ``helpers.outputs``: read what the example jobs print;
- ``helpers.faults``, ``helpers.netns_hosts``, ``helpers.slurm_cluster``: fault injection,
  network-namespace "machines", a real one-host SLURM cluster (import them by module).

tests/conftest.py keeps only the fixtures and the environment every test process starts with.
"""

from helpers.outputs import digits_accuracy
from helpers.paths import EXAMPLES, REPO, SCRIPTS, SRC, TESTS
from helpers.processes import distrain_run, held_port, kill_group, python, run

__all__ = [
    "EXAMPLES",
    "REPO",
    "SCRIPTS",
    "SRC",
    "TESTS",
    "digits_accuracy",
    "distrain_run",
    "held_port",
    "kill_group",
    "python",
    "run",
]
