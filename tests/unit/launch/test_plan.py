"""launch/plan.py: the frozen plan: nproc/GPU resolution, rendezvous, the workers' environment.

plan() is called directly; the GPU count, the cores and the network tables are fixed by
monkeypatch, so nothing here depends on the machine or opens a socket.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch import plan
from distrain.launch.agent import agent_args
from distrain.launch.nodes import network
from distrain.launch.report.dry_run import torchrun_command


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("import torch\nprint('hi')\n")
    return str(path)


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 cores, no GPU, one loopback and one Ethernet interface; no name resolution."""
    monkeypatch.setattr(plan, "visible_gpu_count", lambda: 0)
    monkeypatch.setattr(plan, "usable_cores", lambda: 8)
    monkeypatch.setattr(
        network, "interface_addresses", lambda: {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"]}
    )
    monkeypatch.setattr(network, "_hostname_loopback", lambda: None)
    monkeypatch.setattr(
        network, "_resolve", lambda host, what: {"localhost": "127.0.0.1"}.get(host, host)
    )
    monkeypatch.setattr(network, "route_to", lambda ip, port=9: ("10.0.0.2", "eth0"))


# -- plan() -----------------------------------------------------------------------------------
def test_plan_sets_nproc_and_the_workers_environment(script: str) -> None:
    launch = plan.plan(["-n", "2", "--watchdog", "30", script, "--lr", "0.1"])
    assert launch.args.nproc_per_node == "2"
    assert launch.args.training_script == script
    assert launch.args.training_script_args == ("--lr", "0.1")
    assert launch.network is None  # one node
    assert launch.env == {
        "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "DISTRAIN_WATCHDOG": "30.0",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "4",
                          "DISTRAIN_LAUNCHER": "distrain-run"}  # fmt: skip


def test_plan_leaves_a_user_omp_num_threads_and_store_choice(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0")
    launch = plan.plan(["-n", "2", script])
    assert "OMP_NUM_THREADS" not in launch.env
    assert launch.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


def test_plan_run_dir_is_absolute_and_defaults_to_log_dir(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert plan.plan(["--log-dir", "logs", script]).env["DISTRAIN_RUN_DIR"] == str(
        tmp_path / "logs"
    )
    assert plan.plan(["--log-dir", "logs", "--run-dir", "runs/a", script]).env[
        "DISTRAIN_RUN_DIR"
    ] == str(tmp_path / "runs/a")
    assert "DISTRAIN_RUN_DIR" not in plan.plan([script]).env


def test_nproc_auto_uses_cores_without_gpus(script: str) -> None:
    assert plan.plan(["--nproc", "auto", script]).args.nproc_per_node == "8"
    assert plan.plan(["--nproc-per-node", "cpu", script]).args.nproc_per_node == "8"


def test_nproc_auto_uses_the_gpus_when_there_are(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "visible_gpu_count", lambda: 4)
    assert plan.plan(["-n", "auto", script]).args.nproc_per_node == "4"


def test_gpus_select_devices_and_set_nproc(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "visible_gpu_count", lambda: 4)
    launch = plan.plan(["--gpus", "0, 3", script])
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,3"
    assert launch.args.nproc_per_node == "2"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--gpus", "0,a"], r"--gpus expects GPU indices like 0,3 \(got '0,a'\)"),
     (["--gpus", "0,7"], r"--gpus 0,7: GPU 7 does not exist \(4 GPU\(s\) visible\)"),
     (["--gpus", "0,1", "-n", "3"], r"--nproc 3 disagrees with --gpus 0,1 \(2 GPUs\)"),
     (["--cpu", "--gpus", "0"],
      "--cpu rehearses on CPU processes; it cannot be combined with --gpus"),
     (["-n", "two"], r"--nproc expects an integer or 'auto' \(got 'two'\)"),
     (["-n", "0"], r"the number of processes must be at least 1 \(got 0\)"),
     (["--nproc-per-node", "x"], r"--nproc-per-node expects an integer or auto \(got 'x'\)"),
     (["-n", "2", "--nproc-per-node", "3"],
      r"--nproc-per-node 3 disagrees with --nproc/--gpus \(2\)"),
     (["--nnodes", "0"], r"--nnodes 0: needs 1 <= MIN <= MAX nodes"),
     (["--watchdog", "soon"], r"--watchdog expects seconds \(got 'soon'\)"),
     (["--master-port", "70000"], r"--master-port 70000 is outside 1..65535"),
     (["--launcher", "srun"], r"argument --launcher: invalid choice: 'srun'")],
)  # fmt: skip
def test_plan_usage_errors(
    script: str, monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.setattr(plan, "visible_gpu_count", lambda: 4)
    with pytest.raises(UsageError, match=message):
        plan.plan([*argv, script])


def test_plan_needs_a_script_that_exists(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no training script given"):
        plan.plan(["-n", "2"])
    with pytest.raises(UsageError, match=r"script not found: .*nope\.py"):
        plan.plan([str(tmp_path / "nope.py")])
    with pytest.raises(UsageError, match=r"is a directory, not a training script"):
        plan.plan([str(tmp_path)])


def test_module_mode_does_not_check_for_a_file() -> None:
    assert plan.plan(["-m", "some.module"]).args.module is True


def test_help_exits_zero_before_the_script(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        plan.plan(["--help"])
    assert info.value.code == 0
    assert "distrain run" in capsys.readouterr().out
    # a script's own --help is the script's
    assert plan.plan([script, "--help"]).args.training_script_args == ("--help",)


def test_legacy_local_rank_appends_the_agent_macro(script: str) -> None:
    args = plan.plan(["--legacy-local-rank", script, "--x"]).args
    assert args.training_script_args == ("--x", "--local_rank=${local_rank}")


def test_cpu_rehearsal_sets_the_stand_in_count(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    launch = plan.plan(["--cpu", "-n", "3", script])
    assert launch.env["DISTRAIN_CPU_REHEARSAL"] == "3"
    assert launch.env["PYTHONPATH"].endswith(os.path.join("rehearse", "boot"))
    assert launch.start_lines[0].startswith(
        "distrain run --cpu: 3 CPU processes stand in for 3 GPUs"
    )


def test_multi_node_plan_pins_the_interface_and_c10d_timings(script: str) -> None:
    launch = plan.plan(
        ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.2:29400", script]
    )
    assert launch.network is not None and launch.network.iface == "eth0"
    assert (
        launch.env["GLOO_SOCKET_IFNAME"] == "eth0"
        and launch.env["DISTRAIN_BIND_ADDR"] == "10.0.0.2"
    )
    conf = launch.args.rdzv_conf.split(",")
    assert "is_host=1" in conf and "keep_alive_interval=2" in conf and "last_call_timeout=2" in conf


# -- the dry-run command ----------------------------------------------------------------------
def test_torchrun_command_static_with_separator_for_dash_args(script: str) -> None:
    launch = plan.plan(["-n", "2", "--max-restarts", "3", script, "--lr", "1"])
    assert torchrun_command(launch) == [
        "torchrun", "--nnodes", "1:1", "--nproc-per-node", "2", "--node-rank", "0", "--master-addr",
                                         "127.0.0.1",
        "--max-restarts", "3", script, "--", "--lr", "1"]  # fmt: skip


def test_torchrun_command_rendezvous_without_separator(script: str) -> None:
    launch = plan.plan(["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                        "10.0.0.2:29400", "--rdzv-id", "job", script, "data"])  # fmt: skip
    cmd = torchrun_command(launch)
    assert cmd[:4] == ["torchrun", "--nnodes", "1:2", "--nproc-per-node"]
    assert (
        cmd[cmd.index("--rdzv-endpoint") + 1] == "10.0.0.2:29400"
        and cmd[cmd.index("--rdzv-id") + 1] == "job"
    )
    assert "--rdzv-conf" in cmd and "--node-rank" not in cmd
    assert cmd[-2:] == [script, "data"]


# -- the plan is final ------------------------------------------------------------------------
def test_the_plan_and_its_options_cannot_change(script: str) -> None:
    import dataclasses

    launch = plan.plan(["-n", "2", script])
    with pytest.raises(dataclasses.FrozenInstanceError):
        launch.network = None  # type: ignore[misc]
    with pytest.raises(AttributeError, match="the launch plan is final: nnodes"):
        launch.args.nnodes = "2"
    with pytest.raises(TypeError):
        launch.env["X"] = "1"  # type: ignore[index]


def test_plan_never_reads_sys_argv(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = plan.plan(["-n", "2", script, "--nproc-per-node", "3"]).args
    # the process's own argv is someone else's (a tool that plans a job, a test runner)
    monkeypatch.setattr("sys.argv", ["distrain", "run", "--nproc-per-node", "5", "--nnodes", "x"])
    assert plan.plan(["-n", "2", script, "--nproc-per-node", "3"]).args == expected
    # given before the script it is the launcher's: it must agree with -n (either spelling)
    for spelling in ("--nproc-per-node", "--nproc_per_node"):
        with pytest.raises(UsageError, match="--nproc-per-node 3 disagrees"):
            plan.plan(["-n", "2", spelling, "3", script])


def test_one_node_rendezvous_is_final_in_the_plan(script: str) -> None:
    launch = plan.plan(["-n", "2", script])
    r = launch.rendezvous
    assert (r.backend, r.endpoint, r.local_addr, r.standalone) == (
        "c10d",
        "127.0.0.1:0",
        "127.0.0.1",
        False,
    )
    assert launch.agent_store is not None and (
        launch.agent_store.host,
        launch.agent_store.port,
    ) == ("127.0.0.1", 0)
    # the dry run shows what torchrun would be given; the agent gets the store's real port
    assert launch.args.rdzv_backend == "static" and "--rdzv-backend" not in torchrun_command(launch)
    ns = agent_args(launch, r.on_port(41234))
    assert (ns.rdzv_backend, ns.rdzv_endpoint, ns.rdzv_id, ns.master_port) == (
        "c10d",
        "127.0.0.1:41234",
        r.id,
        29500,
    )
    assert ns.start_method == "forkserver" and ns.run_path is True and ns.training_script_args == []
    ns.nnodes = "3"  # a copy: torch may do what it likes with it
    assert agent_args(launch).nnodes == "1:1"


def test_multi_node_static_plan_keeps_torchrun_defaults(script: str) -> None:
    launch = plan.plan(["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.2",
                        "--start-method", "spawn", script])  # fmt: skip
    r = launch.rendezvous
    assert (r.backend, r.endpoint, r.master_port, r.local_addr) == ("static", "", 29500, "10.0.0.2")
    assert launch.agent_store is None and launch.start.method == "spawn"
    assert agent_args(launch).run_path is False
