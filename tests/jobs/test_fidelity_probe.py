"""The fidelity probe (issues 31, 41, 47): what a script sees under `distrain run` is what it sees
under torchrun, but for the differences docs/environment.md lists (the last section).

tests/scripts/shadowed/probe_record.py records, per rank, ranks, argv, sys.path, cwd, ``__file__``
(and whether the script finds its files through it after a chdir), the file of every top-level
module, the environment, the start method, signal dispositions and mask, faulthandler, dynamo's
log level and sys.excepthook; fidelity_probe.py sits beside its own ``yaml/`` while PyYAML is
installed. The scripts are given by a relative path, as users type them. Three probes: a torch
script, one that sets ``TORCH_LOGS`` before ``import torch``, one that never imports torch; the
first under three parents (an interactive shell's foreground job, a script's background job with
SIGINT/SIGQUIT ignored, ``nohup`` with SIGHUP ignored).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from helpers import REPO, SCRIPTS, python, run
from helpers.compat import compat

pytestmark = pytest.mark.timeout(400)
#: the probes, relative to SCRIPTS (the folder the jobs start in)
PROBE, ENV_PROBE, NO_TORCH_PROBE = (
    f"shadowed/{name}.py" for name in ("fidelity_probe", "fidelity_env", "fidelity_no_torch")
)
#: the parents: a wrapper sets the dispositions each leaves to its child, then execs the rest
WITH_DISPOSITIONS = (
    "import os, signal, sys\n"
    "for item in sys.argv[1].split(','):\n"
    "    name, how = item.split('=')\n"
    "    signal.signal(getattr(signal, name), getattr(signal, how))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])"
)
ARGS = ["positional", "--flag", "value", "--local_rank-looking=x"]

#: environment variables only distrain's workers have
ADDED = {"DISTRAIN_BIND_ADDR", "DISTRAIN_LAUNCHER", "DISTRAIN_LAUNCHER_PID",
         "DISTRAIN_RDZV_ENDPOINT",
         "DISTRAIN_JOB_DIR", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
         "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}  # fmt: skip
#: variables both have, whose value distrain sets differently on purpose
CHANGED = {"MASTER_ADDR", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
           "OMP_NUM_THREADS"}  # fmt: skip
#: variables whose value differs between any two runs, whichever the launcher
PER_RUN = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "DTEST_PROBE_DIR"}
#: fast start: the fork server's main module (docs/environment.md)
FAST_ONLY_MODULES = {"__mp_main__"}
#: fast start: what else differs, by the probe's key, and the name the doc gives it
FAST_ONLY = {"torch_save_wrapped": "torch.save"}


def _records(folder: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))}


def _under(parent: str, cmd: list[str]) -> list[str]:
    """`cmd` as started by `parent`: "terminal" (an interactive shell's foreground job: nothing
    ignored), "background" (a script's ``( … ) &``: a shell without job control starts it with
    SIGINT and SIGQUIT ignored; set here, as a session of its own may not get them from bash),
    "nohup" (SIGHUP ignored)."""
    if parent == "terminal":
        return [python(), "-c", WITH_DISPOSITIONS, "SIGINT=SIG_DFL,SIGQUIT=SIG_DFL,SIGHUP=SIG_DFL",
                *cmd]  # fmt: skip
    if parent == "background":
        shell = ["bash", "-c", f"( {shlex.join(cmd)} ) & wait $!"]
        return [python(), "-c", WITH_DISPOSITIONS, "SIGINT=SIG_IGN,SIGQUIT=SIG_IGN", *shell]
    assert parent == "nohup"
    return ["nohup", *cmd]


def _probe(
    tmp_path: Path, name: str, cmd: list[str], script: str = PROBE, parent: str = "terminal"
) -> tuple[dict[int, dict], str]:
    folder = tmp_path / name
    folder.mkdir()
    res = run(
        _under(parent, cmd + [script, *ARGS]),
        timeout=300,
        env={"DTEST_PROBE_DIR": str(folder)},
        cwd=SCRIPTS,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return _records(folder), res.stderr


TORCHRUN = [python(), "-m", "torch.distributed.run", "--nproc-per-node", "2"]


def _distrain(method: str = "fast") -> list[str]:
    return [python(), "-m", "distrain.cli", "run", "--start-method", method, "-n", "2"]


def differences(native: dict, ours: dict, fast: bool) -> list[str]:
    """Every difference between two ranks' records that docs/environment.md does not list."""
    found = []
    for key in sorted(set(native) | set(ours)):
        a, b = native.get(key), ours.get(key)
        if key == "env":
            for var in sorted(set(a) | set(b)):
                if var in PER_RUN or (var in CHANGED and var in a and var in b):
                    continue
                if var in ADDED and var not in a:
                    continue
                if a.get(var) != b.get(var):
                    found.append(f"env {var}: {a.get(var)!r} (torchrun) != {b.get(var)!r}")
        elif key == "modules":
            for mod, where in sorted(a.items()):
                if fast and mod in FAST_ONLY_MODULES:
                    continue
                if b.get(mod) != where:
                    found.append(f"module {mod}: {where} (torchrun) != {b.get(mod)}")
        elif fast and key in FAST_ONLY:
            continue
        elif a != b:
            found.append(f"{key}: {a!r} (torchrun) != {b!r}")
    return found


@pytest.mark.parametrize(
    ("method", "parent"),
    [
        # the probe is a plain torchrun script (no distrain.init()): what it sees is the cell
        pytest.param(method, parent, marks=compat(mode, "torchrun_plain"), id=f"{method}-{parent}")
        for method, parent, mode in (
            ("fast", "terminal", "plain"),
            ("spawn", "terminal", "spawn"),
            ("fast", "background", "plain"),
            ("fast", "nohup", "plain"),
        )
    ],
)
def test_the_script_sees_what_it_sees_under_torchrun(
    tmp_path: Path, method: str, parent: str
) -> None:
    native, _ = _probe(tmp_path, "torchrun", TORCHRUN, parent=parent)
    ours, _ = _probe(tmp_path, method, _distrain(method), parent=parent)
    assert sorted(native) == sorted(ours) == [0, 1]
    assert native[1]["yaml_marker"] == "local yaml beside the script"
    assert native[0]["finds_its_files_after_chdir"] is True
    for rank in (0, 1):
        assert differences(native[rank], ours[rank], method == "fast") == []
        # the fast start's worker saves atomically (worker/atomic_save.py); spawn is torch's
        assert ours[rank]["torch_save_wrapped"] is (method == "fast")


@compat("cpu", "torchrun_plain")
def test_cpu_processes_get_the_dispositions_of_torchruns_workers(tmp_path: Path) -> None:
    """`--cpu`'s processes are forked workers too: started from a background job, they get what
    torchrun's exec'd workers get (issue 47)."""
    native, _ = _probe(tmp_path, "torchrun", TORCHRUN, parent="background")
    ours, _ = _probe(tmp_path, "cpu", [*_distrain(), "--cpu"], parent="background")
    for rank in (0, 1):
        assert ours[rank]["signals"] == native[rank]["signals"]
        assert ours[rank]["signals"]["SIGINT"] == "_signal.default_int_handler"
        assert ours[rank]["blocked_signals"] == native[rank]["blocked_signals"] == []


def test_what_the_script_sets_before_importing_torch_is_honoured(tmp_path: Path) -> None:
    native, _ = _probe(tmp_path, "torchrun", TORCHRUN, script=ENV_PROBE)
    ours, err = _probe(tmp_path, "fast", _distrain(), script=ENV_PROBE)
    assert native[0]["dynamo_log_level"] == 10  # DEBUG: TORCH_LOGS=+dynamo was read at import
    for rank in (0, 1):
        assert differences(native[rank], ours[rank], fast=True) == []
    said = [line for line in err.splitlines() if "sets TORCH_LOGS" in line]
    assert said == [
        "distrain run: fidelity_env.py sets TORCH_LOGS (line 6) before torch reads it at import, "
        "and the fork server imported torch already; starting workers in fresh interpreters"
    ], err[-3000:]


def test_a_script_that_never_imports_torch_gets_no_torch(tmp_path: Path) -> None:
    native, _ = _probe(tmp_path, "torchrun", TORCHRUN, script=NO_TORCH_PROBE)
    ours, err = _probe(tmp_path, "fast", _distrain(), script=NO_TORCH_PROBE)
    for rank in (0, 1):
        assert native[rank]["torch_imported"] is ours[rank]["torch_imported"] is False
        assert differences(native[rank], ours[rank], fast=False) == []
    assert "fresh interpreters" not in err, err[-2000:]  # nothing the script sees changed


def test_the_documented_list_is_the_tests() -> None:
    doc = (REPO / "docs" / "environment.md").read_text()
    section = doc[doc.index("## What a worker sees under `distrain run`") :]
    names = ADDED | CHANGED | (PER_RUN - {"DTEST_PROBE_DIR"}) | FAST_ONLY_MODULES
    for name in sorted(names | set(FAST_ONLY.values())):
        assert f"`{name}" in section, (
            f"{name} is allowed to differ but docs/environment.md does not say so"
        )
