"""launch/plan.py: `distrain run` argument splitting, nproc/GPU resolution, the workers' environment.

plan() is called directly; the GPU count, the cores and the network tables are fixed by
monkeypatch, so nothing here depends on the machine or opens a socket.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch import network, plan
from distrain.launch.plan import _OWN_OPTIONS, _option_table, _torchrun_parser, split_argv

OPTIONS = {"-n": True, "--nproc": True, "--dry-run": False, "--master-port": True, "-m": False}


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 cores, no GPU, one loopback and one Ethernet interface; no name resolution."""
    monkeypatch.setattr(plan, "_visible_gpu_count", lambda: 0)
    monkeypatch.setattr(plan, "usable_cores", lambda: 8)
    monkeypatch.setattr(
        network, "interface_addresses", lambda: {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"]}
    )
    monkeypatch.setattr(network, "_hostname_loopback", lambda: None)
    monkeypatch.setattr(
        network, "_resolve", lambda host, what: {"localhost": "127.0.0.1"}.get(host, host)
    )
    monkeypatch.setattr(network, "route_to", lambda ip, port=9: ("10.0.0.2", "eth0"))


# -- split_argv -------------------------------------------------------------------------------
def test_split_at_the_first_non_option() -> None:
    assert split_argv(["-n", "2", "train.py", "--n", "5", "-m"], OPTIONS) == (
        ["-n", "2"],
        ["train.py", "--n", "5", "-m"],
    )


def test_a_flag_before_the_script_takes_no_value() -> None:
    assert split_argv(["-n", "2", "--dry-run", "t.py", "--n", "5"], OPTIONS) == (
        ["-n", "2", "--dry-run"],
        ["t.py", "--n", "5"],
    )


def test_split_at_double_dash() -> None:
    assert split_argv(["--dry-run", "--", "-weird.py", "x"], OPTIONS) == (
        ["--dry-run"],
        ["-weird.py", "x"],
    )


def test_an_attached_value_does_not_consume_the_next_token() -> None:
    assert split_argv(["--nproc=4", "train.py", "x"], OPTIONS) == (["--nproc=4"], ["train.py", "x"])


def test_split_without_a_script_keeps_everything() -> None:
    assert split_argv(["--dry-run", "-n", "2"], OPTIONS) == (["--dry-run", "-n", "2"], [])


def test_split_refuses_unknown_and_abbreviated_options() -> None:
    with pytest.raises(UsageError, match="unknown option --npr "):
        split_argv(["--npr", "2", "train.py"], OPTIONS)
    with pytest.raises(UsageError, match="script options go after the script"):
        split_argv(["--lr=3", "train.py"], OPTIONS)


def test_option_table_knows_torchrun_and_distrain_flags() -> None:
    table = _option_table(_torchrun_parser())
    assert table["--nnodes"] is True and table["--standalone"] is False
    assert table["--master_port"] is True and table["-m"] is False
    assert all(table[name] == takes for name, takes in _OWN_OPTIONS.items())


def test_parser_defaults_fast_start_and_forwards_sigusr1() -> None:
    args = _torchrun_parser().parse_args(["x.py"])
    assert args.start_method == "fast"
    assert "SIGUSR1" in args.signals_to_handle.split(",")
    assert args.launcher == "torchrun"


# -- plan() -----------------------------------------------------------------------------------
def test_plan_sets_nproc_and_the_workers_environment(script: str) -> None:
    launch = plan.plan(["-n", "2", "--watchdog", "30", script, "--lr", "0.1"])
    assert launch.args.nproc_per_node == "2"
    assert launch.args.training_script == script
    assert launch.args.training_script_args == ["--lr", "0.1"]
    assert launch.network is None  # one node
    assert launch.env == {
        "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "DISTRAIN_WATCHDOG": "30.0",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "4", "DISTRAIN_LAUNCHER": "distrain-run"}  # fmt: skip


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
    monkeypatch.setattr(plan, "_visible_gpu_count", lambda: 4)
    assert plan.plan(["-n", "auto", script]).args.nproc_per_node == "4"


def test_gpus_select_devices_and_set_nproc(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "_visible_gpu_count", lambda: 4)
    launch = plan.plan(["--gpus", "0, 3", script])
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,3"
    assert launch.args.nproc_per_node == "2"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--gpus", "0,a"], r"--gpus expects GPU indices like 0,3 \(got '0,a'\)"),
     (["--gpus", "0,7"], r"--gpus 0,7: GPU 7 does not exist \(4 GPU\(s\) visible\)"),
     (["--gpus", "0,1", "-n", "3"], r"--nproc 3 disagrees with --gpus 0,1 \(2 GPUs\)"),
     (["--cpu", "--gpus", "0"], "--cpu rehearses on CPU processes; it cannot be combined with --gpus"),
     (["-n", "two"], r"--nproc expects an integer or 'auto' \(got 'two'\)"),
     (["-n", "0"], r"the number of processes must be at least 1 \(got 0\)"),
     (["--nproc-per-node", "x"], r"--nproc-per-node expects an integer or auto \(got 'x'\)"),
     (["-n", "2", "--nproc-per-node", "3"], r"--nproc-per-node 3 disagrees with --nproc/--gpus \(2\)"),
     (["--nnodes", "0"], r"--nnodes 0: needs 1 <= MIN <= MAX nodes"),
     (["--watchdog", "soon"], r"--watchdog expects seconds \(got 'soon'\)"),
     (["--master-port", "70000"], r"--master-port 70000 is outside 1..65535"),
     (["--launcher", "srun"], r"argument --launcher: invalid choice: 'srun'")],
)  # fmt: skip
def test_plan_usage_errors(
    script: str, monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.setattr(plan, "_visible_gpu_count", lambda: 4)
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
    assert plan.plan([script, "--help"]).args.training_script_args == ["--help"]


def test_legacy_local_rank_appends_the_agent_macro(script: str) -> None:
    args = plan.plan(["--legacy-local-rank", script, "--x"]).args
    assert args.training_script_args == ["--x", "--local_rank=${local_rank}"]


def test_cpu_rehearsal_sets_the_stand_in_count(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    launch = plan.plan(["--cpu", "-n", "3", script])
    assert launch.env["DISTRAIN_CPU_REHEARSAL"] == "3"
    assert launch.env["PYTHONPATH"].endswith(os.path.join("rehearse", "boot"))
    assert launch.rehearsal_line.startswith(
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
    assert launch.torchrun_command() == [
        "torchrun", "--nnodes", "1:1", "--nproc-per-node", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
        "--max-restarts", "3", script, "--", "--lr", "1"]  # fmt: skip


def test_torchrun_command_rendezvous_without_separator(script: str) -> None:
    launch = plan.plan(["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.2:29400",
                        "--rdzv-id", "job", script, "data"])  # fmt: skip
    cmd = launch.torchrun_command()
    assert cmd[:4] == ["torchrun", "--nnodes", "1:2", "--nproc-per-node"]
    assert (
        cmd[cmd.index("--rdzv-endpoint") + 1] == "10.0.0.2:29400"
        and cmd[cmd.index("--rdzv-id") + 1] == "job"
    )
    assert "--rdzv-conf" in cmd and "--node-rank" not in cmd
    assert cmd[-2:] == [script, "data"]
