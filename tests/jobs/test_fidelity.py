"""`distrain run` is torchrun for the script's eyes (issue 31): the job launched is the job run.

- flag_spawn.py (pytorch/examples imagenet's shape: ``mp.spawn`` only under
  ``if args.multiprocessing_distributed``) run the torchrun way (``--dist-url env://``) is N
  ranks, not one: a source-only guess that depends on arguments never reshapes the job;
  ``--self-starting`` does, when the flag asks the script to start its workers.
- shadowed/train.py sits beside its own ``yaml/`` while PyYAML is installed: every start method
  imports the local one, as ``python train.py`` and torchrun do.
- raise_after_init.py fails after ``init_process_group`` (torch's ``[rankN]`` hook installed),
  raise_after_distrain_init.py after ``distrain.init()``: the cause is on the last line, with
  either start method.
"""

from __future__ import annotations

import re
import socket

import pytest
from helpers import SCRIPTS, distrain_run, python, run

pytestmark = pytest.mark.timeout(300)
FLAG_SPAWN = str(SCRIPTS / "flag_spawn.py")
SHADOWED = str(SCRIPTS / "shadowed" / "train.py")


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize("cpu", [False, True], ids=["plain", "cpu"])
def test_flag_gated_spawn_run_the_torchrun_way_is_n_ranks(cpu: bool) -> None:
    flags = ["--cpu"] if cpu else []
    res = distrain_run(*flags, "-n", "2", FLAG_SPAWN, "--dist-url", "env://")
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = sorted(re.findall(r"rank (\d) of (\d)", res.stdout))
    assert ranks == [("0", "2"), ("1", "2")], res.stdout + res.stderr[-2000:]
    assert "only if args.multiprocessing_distributed" in res.stderr, res.stderr[-2000:]
    assert "running it once" not in res.stderr and "it runs once" not in res.stderr, res.stderr[
        -2000:
    ]


def test_flag_gated_spawn_with_its_flag_and_self_starting_runs_once() -> None:
    res = distrain_run(
        "--self-starting", "-n", "2", FLAG_SPAWN, "--multiprocessing-distributed", "--port", _port()
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(re.findall(r"rank (\d) of (\d)", res.stdout)) == [("0", "2"), ("1", "2")], (
        res.stdout
    )
    assert "running it once (not 2 copies)" in res.stderr, res.stderr[-2000:]


def _yaml_files(out: str) -> set[str]:
    return set(re.findall(r"rank \d yaml from (\S+) marker=", out))


@pytest.mark.parametrize("launcher", ["torchrun", "fast", "spawn"])
def test_a_local_package_beside_the_script_wins_over_the_installed_one(launcher: str) -> None:
    if launcher == "torchrun":
        cmd = [python(), "-m", "torch.distributed.run", "--nproc-per-node", "2", SHADOWED]
        res = run(cmd, timeout=200)
    else:
        res = distrain_run("--start-method", launcher, "-n", "2", SHADOWED)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    local = str(SCRIPTS / "shadowed" / "yaml" / "__init__.py")
    assert _yaml_files(res.stdout) == {local}, res.stdout
    assert res.stdout.count("marker=local yaml beside the script") == 2, res.stdout


@pytest.mark.parametrize("method", ["fast", "spawn"])
@pytest.mark.parametrize("script", ["raise_after_init.py", "raise_after_distrain_init.py"])
def test_a_script_failing_after_init_has_its_cause_on_the_last_line(
    script: str, method: str
) -> None:
    """With either start method: a fresh interpreter (spawn) runs no distrain code of its own
    at its end, and the rank that raised may still be exiting when its peer's failure ends the
    job (the agent then stops it with SIGTERM)."""
    res = distrain_run("--start-method", method, "-n", "2", str(SCRIPTS / script))
    assert res.returncode == 1, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"distrain run: job failed: rank 1 \(pid \d+\) (exited with code 1|failed): "
        r"KeyError: 'the cause, raised after (init|distrain\.init)'",
        last,
    ), res.stderr[-3000:]


@pytest.mark.parametrize("method", ["fast", "spawn"])
def test_a_self_started_childs_failure_is_the_scripts_run_once(method: str) -> None:
    res = distrain_run(
        "--start-method", method, "-n", "2", str(SCRIPTS / "spawn_child_raises.py"), _port()
    )
    assert res.returncode == 1, res.stderr[-3000:]
    assert res.stdout.count("child rank 1 started") == 1, res.stdout + res.stderr[-3000:]
    assert "fresh interpreters" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.endswith("exited with code 1: RuntimeError: child 1 failed on its own"), last


@pytest.mark.parametrize("cpu", [False, True], ids=["plain", "cpu"])
def test_a_local_rank_tutorial_that_fails_gets_the_legacy_hint(tmp_path, cpu: bool) -> None:
    flags = ["--cpu"] if cpu else []
    res = distrain_run(*flags, "-n", "2", str(SCRIPTS / "old_style.py"), str(tmp_path))
    assert res.returncode != 0, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert "the following arguments are required: --local_rank" in res.stderr, res.stderr[-3000:]
    assert re.fullmatch(
        r"distrain run: hint: old_style\.py parses --local_rank \(line \d+\), which "
        r"torch\.distributed\.launch passed and torchrun does not; add "
        r"--legacy-local-rank to pass it",
        lines[-2],
    ), lines[-3:]
    assert lines[-1].startswith("distrain run: job failed: rank "), lines[-1]
    ok = distrain_run(
        *flags, "--legacy-local-rank", "-n", "2", str(SCRIPTS / "old_style.py"), str(tmp_path)
    )
    assert ok.returncode == 0 and "hint" not in ok.stderr, ok.stderr[-3000:]
