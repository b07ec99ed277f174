"""settings.py: a worker's DISTRAIN_* settings: argument > environment > default; errors; seconds
and the boot folder both sides read."""

from __future__ import annotations

import os

import pytest

from distrain.contract import USAGE_EXIT_CODE
from distrain.errors import DistrainError, UsageError
from distrain.settings import (
    DEFAULT_METRICS_INTERVAL_S,
    DEFAULT_TRAIN_TIMEOUT_S,
    Settings,
    parse_seconds,
    rehearse_boot_dir,
)


def test_defaults_with_an_empty_environment() -> None:
    s = Settings.read({})
    assert s == Settings()
    assert s.watchdog_s is None and s.train_timeout_s == DEFAULT_TRAIN_TIMEOUT_S == 300.0
    assert s.metrics_interval_s == DEFAULT_METRICS_INTERVAL_S and s.cpu_rehearsal is None


def test_environment_is_read_and_typed() -> None:
    s = Settings.read(
        {
            "DISTRAIN_DEVICE": "cuda:1",
            "DISTRAIN_NUM_THREADS": "3",
            "DISTRAIN_RUN_DIR": "runs/a",
            "DISTRAIN_WATCHDOG": "45",
            "DISTRAIN_TRAIN_TIMEOUT": "90",
            "DISTRAIN_METRICS_INTERVAL": "0.01",
            "DISTRAIN_BIND_ADDR": "10.0.0.1",
            "DISTRAIN_CPU_REHEARSAL": "2",
            "DISTRAIN_LOG_DIR": "logs",
        }
    )
    assert (s.device, s.threads, s.run_dir, s.log_dir) == ("cuda:1", 3, "runs/a", "logs")
    assert (s.watchdog_s, s.train_timeout_s, s.bind_addr, s.cpu_rehearsal) == (
        45.0,
        90.0,
        "10.0.0.1",
        2,
    )
    assert s.metrics_interval_s == 0.05  # raised to the shortest interval recorded


def test_an_argument_wins_over_the_environment() -> None:
    env = {"DISTRAIN_WATCHDOG": "45", "DISTRAIN_NUM_THREADS": "3", "DISTRAIN_DEVICE": "cpu"}
    s = Settings.read(env, watchdog_s=10, threads=1, device=None)
    assert (s.watchdog_s, s.threads, s.device) == (
        10,
        1,
        "cpu",
    )  # None: not given, the environment stays
    assert Settings.read(env, watchdog_s=0).watchdog_s is None  # explicitly off
    assert Settings.read({"DISTRAIN_WATCHDOG": "0"}).watchdog_s is None


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("DISTRAIN_TRAIN_TIMEOUT", "ninety"),
        ("DISTRAIN_TRAIN_TIMEOUT", "-5"),
        ("DISTRAIN_TRAIN_TIMEOUT", "inf"),
        ("DISTRAIN_WATCHDOG", "-1"),
        ("DISTRAIN_WATCHDOG", "nan"),
        ("DISTRAIN_METRICS_INTERVAL", "often"),
        ("DISTRAIN_NUM_THREADS", "two"),
        ("DISTRAIN_NUM_THREADS", "0"),
        ("DISTRAIN_CPU_REHEARSAL", "-2"),
        ("DISTRAIN_BREAKDOWN", "sometimes"),
    ],
)
def test_a_malformed_value_is_one_line_naming_the_variable(name: str, raw: str) -> None:
    with pytest.raises(DistrainError) as info:
        Settings.read({name: raw})
    assert str(info.value).startswith(f"{name}={raw!r}: expected") and "\n" not in str(info.value)


def test_settings_are_frozen_and_unknown_ones_refused() -> None:
    s = Settings.read({})
    with pytest.raises(AttributeError):
        s.threads = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="unknown setting"):
        Settings.read({}, thread=2)


@pytest.mark.parametrize(
    ("raw", "on"),
    [(None, True), ("1", True), ("on", True), ("0", False), ("OFF", False), ("false", False)],
)
def test_the_breakdown_switch(raw: str | None, on: bool) -> None:
    assert Settings.read({} if raw is None else {"DISTRAIN_BREAKDOWN": raw}).breakdown is on


def test_form_timeout_default_environment_and_bad_value() -> None:
    assert Settings.read({}).form_timeout_s == 60.0
    assert Settings.read({"DISTRAIN_FORM_TIMEOUT": "5"}).form_timeout_s == 5.0
    with pytest.raises(
        DistrainError, match=r"DISTRAIN_FORM_TIMEOUT='soon': expected a positive number of seconds"
    ):
        Settings.read({"DISTRAIN_FORM_TIMEOUT": "soon"})


@pytest.mark.parametrize(
    ("name", "field", "default"),
    [
        ("DISTRAIN_FT_TIMEOUT", "ft_timeout_s", 10.0),
        ("DISTRAIN_FT_QUORUM_TIMEOUT", "ft_quorum_timeout_s", 60.0),
        ("DISTRAIN_FT_START_WAIT", "ft_start_wait_s", 120.0),
        ("DISTRAIN_FT_LINGER", "ft_linger_s", 120.0),
    ],
)
def test_replica_group_bounds_default_environment_and_bad_value(
    name: str, field: str, default: float
) -> None:
    assert getattr(Settings.read({}), field) == default
    assert getattr(Settings.read({name: "2.5"}), field) == 2.5
    for bad in ("soon", "0", "-1", "inf"):
        with pytest.raises(
            DistrainError, match=rf"^{name}='{bad}': expected a positive number of seconds$"
        ):
            Settings.read({name: bad})


def test_node0_wait_default_environment_and_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from distrain.errors import UsageError
    from distrain.launch.replicas.lighthouse import NODE0_WAIT_S, node0_wait_s

    monkeypatch.delenv("DISTRAIN_NODE0_WAIT", raising=False)
    assert node0_wait_s() == NODE0_WAIT_S == 120.0
    monkeypatch.setenv("DISTRAIN_NODE0_WAIT", "7")
    assert node0_wait_s() == 7.0
    monkeypatch.setenv("DISTRAIN_NODE0_WAIT", "later")
    with pytest.raises(UsageError, match="DISTRAIN_NODE0_WAIT"):
        node0_wait_s()


def test_rejoin_timeout_default_environment_and_bad_value() -> None:
    assert Settings.read({}).rejoin_timeout_s == 60.0
    assert Settings.read({"DISTRAIN_REJOIN_TIMEOUT": "15"}).rejoin_timeout_s == 15.0
    with pytest.raises(
        DistrainError, match=r"DISTRAIN_REJOIN_TIMEOUT='-1': expected a positive number of seconds"
    ):
        Settings.read({"DISTRAIN_REJOIN_TIMEOUT": "-1"})


@pytest.mark.parametrize(
    ("text", "expected"), [("5", 5.0), ("0.25", 0.25), ("1e3", 1000.0), (" 7 ", 7.0)]
)
def test_parse_seconds_accepts_positive_numbers(text: str, expected: float) -> None:
    assert parse_seconds(text, "--watchdog") == expected


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf"])
def test_parse_seconds_refuses_non_positive_or_non_finite(text: str) -> None:
    with pytest.raises(UsageError, match=r"--watchdog must be a positive number of seconds"):
        parse_seconds(text, "--watchdog")


def test_parse_seconds_names_the_option_for_non_numbers() -> None:
    with pytest.raises(UsageError, match=r"--watchdog expects seconds \(got 'ten'\)") as info:
        parse_seconds("ten", "--watchdog")
    assert info.value.exit_code == USAGE_EXIT_CODE


def test_rehearse_boot_dir_holds_the_sitecustomize_the_launcher_prepends() -> None:
    folder = rehearse_boot_dir()
    assert os.path.isabs(folder)
    assert os.path.isfile(os.path.join(folder, "sitecustomize.py"))
