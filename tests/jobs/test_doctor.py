"""`distrain doctor`: real probes of this machine, and the all-ranks check on real gloo jobs."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
from helpers import python, run
from helpers.faults import fault_env

from distrain.tools.doctor.machine.compat import check_arch, check_driver

DOCTOR = [python(), "-m", "distrain.cli", "doctor"]
SCHEMA_KEYS = {
    "schema_version",
    "tool",
    "distrain_version",
    "hostname",
    "mode",
    "elapsed_s",
    "status",
    "summary",
    "checks",
    "ranks",
}
CHECK_KEYS = {"id", "group", "title", "status", "seen", "fix", "data"}


def _doc(res: subprocess.CompletedProcess[str]) -> dict:
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"not JSON (exit {res.returncode}):\n{res.stdout[-3000:]}\n--- "
            f"stderr\n{res.stderr[-3000:]}"
        )


def _by_id(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["checks"]}


@contextlib.contextmanager
def _listening() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _nvml_loads() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def _loopback_hostname() -> bool:
    try:
        return socket.gethostbyname(socket.gethostname()).startswith("127.")
    except OSError:
        return False


def test_local_json_schema_and_real_findings() -> None:
    """A port held by this test, a reachable master, loopback hostname, oversubscribed threads."""
    with _listening() as held:
        res = run(
            DOCTOR
            + [
                "--json",
                "--ports",
                str(held),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(held),
            ],
            timeout=120,
            env={"OMP_NUM_THREADS": "64"},
        )
    doc = _doc(res)
    assert (
        SCHEMA_KEYS <= doc.keys()
        and doc["schema_version"] == 1
        and doc["mode"] == "local"
        and doc["ranks"] is None
    )
    for check in doc["checks"]:
        assert CHECK_KEYS <= check.keys() and check["status"] in ("ok", "info", "warn", "fail"), (
            check
        )
        if check["status"] in ("warn", "fail"):
            assert check["fix"], f"{check['id']} has no fix"
    assert sum(doc["summary"].values()) == len(doc["checks"])
    assert res.returncode == (1 if doc["summary"]["fail"] else 0)
    checks = _by_id(doc)
    port = checks[f"network.port.{held}"]
    assert port["status"] == "warn" and f"pid {os.getpid()}" in port["seen"], port
    master = checks["network.master"]
    assert (
        master["status"] == "ok"
        and master["data"]["connect"] == "open"
        and master["data"]["interface"] == "lo"
    ), master
    assert (
        checks["limits.threads"]["status"] == "warn"
        and "oversubscribed" in checks["limits.threads"]["seen"]
    )
    hostname = checks["network.hostname"]
    assert hostname["status"] == ("warn" if _loopback_hostname() else "ok"), hostname
    for needed in (
        "python.version",
        "torch.build",
        "torch.backends",
        "gpu.nvml",
        "container.runtime",
        "container.shm",
        "network.interfaces",
        "limits.nofile",
        "limits.memlock",
        "tools.mpirun",
        "tools.etcd",
    ):
        assert needed in checks, needed
    if not _nvml_loads():  # this machine: no driver → a clean result, not a crash
        nvml = checks["gpu.nvml"]
        assert (
            nvml["status"] == "ok"
            and "no GPU driver" in nvml["seen"]
            and nvml["data"]["state"] == "no_driver"
        )


def test_closed_master_port_and_bad_input() -> None:
    with _listening() as port:
        pass  # now closed: the host answers, nothing listens
    res = run(
        DOCTOR
        + ["--json", "--master-addr", "localhost", "--master-port", str(port), "--expect-gpu"],
        timeout=120,
        env={"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
    )
    checks = _by_id(_doc(res))
    master = checks["network.master"]
    assert master["status"] == "warn" and master["data"]["connect"] == "refused", master
    assert checks["container.runtime"]["data"]["runtime"] == "kubernetes"
    if not _nvml_loads():  # a GPU is expected but there is none: the container fix is given
        nvml = checks["gpu.nvml"]
        assert (
            nvml["status"] == "fail"
            and "--gpus all" in nvml["fix"]
            and "nvidia.com/gpu" in nvml["fix"]
        ), nvml
        assert res.returncode == 1
    res = run(DOCTOR + ["--ports", "http"], timeout=60)
    assert (
        res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "--ports" in res.stderr
    ), res.stderr


@pytest.fixture
def small_tmpfs() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="distrain-shm-")
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", path], capture_output=True
        ).returncode
        == 0
    )
    try:
        if not mounted:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        yield path
    finally:
        if mounted:
            subprocess.run(["umount", path], capture_output=True)
        os.rmdir(path)


def test_small_shm_fails_with_fix(small_tmpfs: str) -> None:
    res = run(DOCTOR + ["--json"], timeout=120, env={"DISTRAIN_SHM_PATH": small_tmpfs})
    doc = _doc(res)
    shm = _by_id(doc)["container.shm"]
    assert shm["status"] == "fail" and shm["data"]["size_bytes"] == 64 * 2**20, shm
    assert "--ipc=host" in shm["fix"] and "--shm-size" in shm["fix"]
    assert res.returncode == 1


def test_compat_tables() -> None:
    assert check_driver("13.0", "580.65.06")[0] == "ok"
    assert check_driver("12.8", "535.104.05")[0] == "warn"  # minor version compatibility only
    assert check_driver("12.4", "470.82.01")[0] == "fail"
    assert check_driver("11.8", "520.61.05")[0] == "ok"
    arch = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert check_arch((8, 9), arch)[0] == "ok"  # sm_86 cubins run on 8.9
    assert check_arch((6, 1), arch)[0] == "fail"
    assert check_arch((9, 0), ["sm_80", "compute_80"])[0] == "warn"  # PTX JIT only


def test_all_ranks_two_processes_via_nproc() -> None:
    res = run(DOCTOR + ["--nproc", "2", "--json", "--timeout", "60"], timeout=240)
    doc = _doc(res)
    assert doc["mode"] == "all-ranks" and doc["ranks"]["world_size"] == 2
    checks = _by_id(doc)
    for cid in ("ranks.checkin", "ranks.barrier", "ranks.versions", "ranks.allreduce"):
        assert checks[cid]["status"] == "ok", checks[cid]
    assert (
        checks["ranks.bandwidth"]["data"]["busbw_gbps"] > 0
        and checks["ranks.latency"]["data"]["latency_us"] > 0
    )
    assert res.returncode == (1 if doc["summary"]["fail"] else 0)
    # how the doctor's own ranks start is not the user's concern (issue 34: "-m runs a module")
    assert "runs a module" not in res.stderr and "fresh interpreters" not in res.stderr, res.stderr[
        -2000:
    ]


def test_all_ranks_three_processes_mismatch_and_straggler() -> None:
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "3",
            "-m",
            "distrain.tools.doctor",
            "--json",
            "--timeout",
            "60",
        ],
        timeout=240,
        env=fault_env(DTEST_FAULT_DOCTOR_VERSION="1:1.13.0", DTEST_FAULT_DOCTOR_SLOW="2"),
    )
    doc = _doc(res)
    checks = _by_id(doc)
    versions = checks["ranks.versions"]
    assert versions["status"] == "fail" and versions["data"]["mismatches"] == {"torch": [1]}, (
        versions
    )
    assert "rank 1 on " in versions["seen"] and "1.13.0" in versions["seen"]
    assert checks["ranks.allreduce"]["status"] == "ok"
    assert 2 in checks["ranks.straggler"]["data"]["stragglers"], checks["ranks.straggler"]
    assert res.returncode != 0


@pytest.mark.parametrize("stage", ["checkin", "barrier"])
def test_missing_rank_is_named_in_bounded_time(stage: str) -> None:
    res = run(
        DOCTOR + ["--nproc", "2", "--json", "--timeout", "5"],
        timeout=150,
        env=fault_env(DTEST_FAULT_DOCTOR_STALL=f"1:{stage}"),
    )
    checks = _by_id(_doc(res))
    check = checks[f"ranks.{stage}"]
    assert check["status"] == "fail" and check["data"]["missing"] == [1], check
    assert "rank(s) 1 " in check["seen"]
    assert res.returncode != 0


def test_the_old_module_name_still_runs_the_doctor() -> None:
    """`-m distrain.doctor` became `-m distrain.tools.doctor`; old command lines failed with
    "No module named distrain.doctor"."""
    old = run([python(), "-m", "distrain.doctor", "--json"], timeout=180)
    doc = _doc(old)
    assert doc["tool"] == "distrain doctor" and doc["mode"] == "local", old.stderr[-2000:]
    assert old.returncode == (1 if doc["summary"]["fail"] else 0)
    helps = [run([python(), "-m", name, "--help"], timeout=120) for name in
             ("distrain.doctor", "distrain.tools.doctor")]  # fmt: skip
    assert helps[0].returncode == 0 and helps[0].stdout == helps[1].stdout
