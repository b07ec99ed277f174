"""The fidelity probe (issue 31): what a script sees under `distrain run` is what it sees under
torchrun, but for the differences docs/environment.md lists (the last section).

tests/scripts/shadowed/fidelity_probe.py records, per rank, ranks, argv, sys.path, cwd, the file
of every top-level module, the environment, the start method, signal dispositions and
sys.excepthook; it sits beside its own ``yaml/`` while PyYAML is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, SCRIPTS, python, run

pytestmark = pytest.mark.timeout(400)
PROBE = str(SCRIPTS / "shadowed" / "fidelity_probe.py")
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


def _probe(tmp_path: Path, name: str, cmd: list[str]) -> dict[int, dict]:
    folder = tmp_path / name
    folder.mkdir()
    res = run(cmd + [PROBE, *ARGS], timeout=300, env={"DTEST_PROBE_DIR": str(folder)})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return _records(folder)


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


@pytest.mark.parametrize("method", ["fast", "spawn"])
def test_the_script_sees_what_it_sees_under_torchrun(tmp_path: Path, method: str) -> None:
    native = _probe(
        tmp_path, "torchrun", [python(), "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    )
    ours = _probe(
        tmp_path,
        method,
        [python(), "-m", "distrain.cli", "run", "--start-method", method, "-n", "2"],
    )
    assert sorted(native) == sorted(ours) == [0, 1]
    assert native[1]["yaml_marker"] == "local yaml beside the script"
    for rank in (0, 1):
        assert differences(native[rank], ours[rank], method == "fast") == []
        # the fast start's worker saves atomically (worker/atomic_save.py); spawn is torch's
        assert ours[rank]["torch_save_wrapped"] is (method == "fast")


def test_the_documented_list_is_the_tests() -> None:
    doc = (REPO / "docs" / "environment.md").read_text()
    section = doc[doc.index("## What a worker sees under `distrain run`") :]
    names = ADDED | CHANGED | (PER_RUN - {"DTEST_PROBE_DIR"}) | FAST_ONLY_MODULES
    for name in sorted(names | set(FAST_ONLY.values())):
        assert f"`{name}" in section, (
            f"{name} is allowed to differ but docs/environment.md does not say so"
        )
