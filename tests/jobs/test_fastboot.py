"""`distrain run`'s fast start (workers forked from a preloading server) and comm hooks.

Real jobs of 1–2 ranks on gloo; the fast path is compared with fresh interpreters
(``--start-method spawn``, torchrun's own path) on the same inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import EXAMPLES, REPO, digits_accuracy, distrain_run, session
from helpers.checkpoints import shared_baseline

SCRIPTS = REPO / "tests" / "fastboot_scripts"
FALLBACK_LINE = "running workers in fresh interpreters instead"


def probe_out(out: Path) -> dict[str, str]:
    """The environment that tells probe.py (and needs_fresh.py) where to write."""
    return {"PROBE_OUT": str(out)}


def ranks(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


PROBE_ARGS = ("--flag", "x", "--exit", "none")


@pytest.mark.slow
def test_forked_workers_see_what_a_fresh_interpreter_sees(tmp_path: Path) -> None:
    seen = {}
    for method in ("fast", "spawn"):
        out = tmp_path / method
        out.mkdir()
        # `--exit none`: sys.exit(None) in a forked worker is the script's success, exit 0
        res = distrain_run(
            "-n", "2", "--start-method", method, str(SCRIPTS / "probe.py"), *PROBE_ARGS,
            env=probe_out(out),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "hello from rank 0" in res.stdout and "hello from rank 1" in res.stdout
        assert FALLBACK_LINE not in res.stderr
        seen[method] = ranks(out)
    assert [r["preloaded"] for r in seen["fast"]] == [True, True]  # really forked from the server
    assert [r["preloaded"] for r in seen["spawn"]] == [False, False]
    # the fork server is forked from the launcher after its `import torch` (one import, not two):
    # its command line is the launcher's, not the stdlib's `python -c "from
    # multiprocessing.forkserver …"`
    assert all(
        "distrain.cli run" in r["parent"] and "forkserver" not in r["parent"] for r in seen["fast"]
    ), seen["fast"]
    for fast, fresh in zip(seen["fast"], seen["spawn"], strict=True):
        assert fast["argv"] == fresh["argv"] == [str(SCRIPTS / "probe.py"), *PROBE_ARGS]
        assert fast["name"] == fresh["name"] == "__main__"
        assert fast["path0"] == fresh["path0"] == str(SCRIPTS)
        assert fast["threads"] == fresh["threads"]
        assert fast["sum"] == fresh["sum"] == 3.0
        assert fast["launcher"] == fresh["launcher"] == "distrain-run"
        assert fast["own_forkserver_exit"] == fresh["own_forkserver_exit"] == 0


@pytest.mark.parametrize(
    ("script_args", "code", "stderr_has"),
    [
        (["--exit", "3"], 3, "exited with code 3"),
        (["--raise"], 1, "ValueError: boom from the probe"),
    ],
)  # `--exit none` (exit 0): test_forked_workers_see_what_a_fresh_interpreter_sees
def test_exit_status_of_a_forked_worker_is_the_scripts(
    tmp_path: Path, script_args: list[str], code: int, stderr_has: str
) -> None:
    res = distrain_run(
        "-n", "1", str(SCRIPTS / "probe.py"), *script_args, env=probe_out(tmp_path), timeout=180
    )
    assert res.returncode == code, res.stderr
    assert stderr_has in res.stderr
    assert json.loads((tmp_path / "rank0.json").read_text())["preloaded"] is True
    if code == 1:
        assert "Traceback" in res.stderr  # as a fresh interpreter would print it


@pytest.mark.slow
def test_script_failing_in_the_fork_path_falls_back_once(tmp_path: Path) -> None:
    res = distrain_run("-n", "2", str(SCRIPTS / "needs_fresh.py"), env=probe_out(tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count(FALLBACK_LINE) == 1, res.stderr
    assert "must be started in a fresh interpreter" in res.stderr
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)] == ["2.0", "2.0"]


def test_module_launch_uses_fresh_interpreters_and_says_so(tmp_path: Path) -> None:
    res = distrain_run("-n", "1", "-m", "json.tool", "--help", timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("starting workers in fresh interpreters") == 1


def test_bad_start_method_is_one_line(tmp_path: Path) -> None:
    res = distrain_run("--start-method", "teleport", str(SCRIPTS / "probe.py"), timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "teleport" in res.stderr


def _digits(out: Path, *extra: str) -> dict[str, torch.Tensor]:
    """Train the digits example (3 epochs, 2 ranks); `extra`: 2 launcher args, then script args."""
    res = distrain_run(
        "-n", "2", *extra[:2], str(EXAMPLES / "train_digits.py"), "--epochs", "3",
        "--out", str(out), *extra[2:], timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (out / "stdout.txt").write_text(res.stdout)
    return torch.load(out / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def digits_fast(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fast-path digits run shared by the equality and the accuracy tests: one per test run,
    not one per xdist worker that meets them (a module fixture is made once per worker)."""

    def make(out: Path) -> str:
        _digits(out, "--start-method", "fast")
        return str(out)

    return Path(session.once(tmp_path_factory, "fastboot-digits-fast", make))


@pytest.mark.slow
def test_digits_forked_start_is_bitwise_equal_to_fresh_start(
    tmp_path: Path, digits_fast: Path
) -> None:
    fast = torch.load(digits_fast / "model.pt", weights_only=True)
    fresh = _digits(tmp_path / "fresh", "--start-method", "spawn")
    assert fast.keys() == fresh.keys()
    assert all(torch.equal(fast[k], fresh[k]) for k in fast)


@pytest.mark.parametrize("hook", ["bf16", "powersgd:rank=2,start=10"])
def test_compression_hooks_train_digits_within_one_percent(
    tmp_path: Path, digits_fast: Path, hook: str
) -> None:
    hooked_model = _digits(tmp_path, "--start-method", "fast", "--comm-hook", hook)
    plain = digits_accuracy((digits_fast / "stdout.txt").read_text())
    hooked = digits_accuracy((tmp_path / "stdout.txt").read_text())
    # 1.5 points = 5 of the 359 test images: 3 short epochs leave that much run-to-run spread
    assert abs(plain - hooked) <= 0.015, (plain, hooked)
    plain_model = torch.load(digits_fast / "model.pt", weights_only=True)
    assert any(
        not torch.equal(plain_model[k], hooked_model[k]) for k in plain_model
    )  # the hook was active


@pytest.mark.parametrize("rehearsal", [[], ["--cpu"]], ids=["cpu", "rehearsed-cuda"])
def test_powersgd_on_gloo_trains_when_the_model_spans_several_buckets(rehearsal: list[str]) -> None:
    # torch's hook on gloo aborts with "Received data size doesn't match" unless one bucket holds
    # all; under --cpu the script's device is a stand-in cuda one, and the group is still gloo
    res = distrain_run(
        *rehearsal, "-n", "2", str(REPO / "tests" / "scripts" / "powersgd_buckets.py"),
        timeout=180, env={"DISTRAIN_DEVICE": ""},
    )  # fmt: skip
    assert res.returncode == 0 and "ranks agree: True" in res.stdout, (
        res.stdout + res.stderr[-2000:]
    )


@pytest.mark.slow
def test_restart_under_the_fast_path_resumes_bitwise(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """SIGKILL of a forked worker: the agent restarts the group from the warm server, bitwise."""
    worker = str(REPO / "tests" / "scripts" / "ckpt_worker.py")
    # the uninterrupted reference (`distrain run -n 2 ckpt_worker.py --out F`) starts fast too,
    # made once per test run (test_checkpoint.py compares with the same one): that a fast start
    # equals a fresh one bit for bit is test_digits_forked_start_is_bitwise_equal_to_fresh_start's
    fresh = shared_baseline(tmp_path_factory, "f32")
    killed = distrain_run(
        "-n", "2", "--max-restarts", "2", "--start-method", "fast", worker,
        "--dir", str(tmp_path / "ckpt"), "--out", str(tmp_path / "fast.pt"), "--kill-at", "6",
        timeout=240,
    )  # fmt: skip
    assert killed.returncode == 0, killed.stderr
    assert (tmp_path / "ckpt" / "FAULT_DONE").exists(), "the fault was not injected"
    assert "distrain: resumed from" in killed.stdout
    assert FALLBACK_LINE not in killed.stderr
    a, b = torch.load(fresh, weights_only=True), torch.load(tmp_path / "fast.pt", weights_only=True)
    assert a["step"] == b["step"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


@pytest.mark.parametrize(
    ("kind", "cause"),
    [
        ("missing-module", "ModuleNotFoundError: No module named 'tqdm_that_is_not_installed'"),
        ("value-error", "ValueError: --data points to no folder"),
        ("syntax-error", "SyntaxError: "),
    ],
)
def test_a_script_error_before_init_runs_once_and_ends_with_its_cause(
    kind: str, cause: str, tmp_path: Path
) -> None:
    """The script's own error is not retried in fresh interpreters (it would fail the same way),
    and the launcher's last line names it."""
    res = distrain_run(
        "-n", "2", str(SCRIPTS / "fails_early.py"), timeout=120, env={"FAILS_EARLY": kind}
    )
    assert res.returncode == 1, res.stderr
    assert FALLBACK_LINE not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("distrain run: job failed: rank ") and cause in last, last


def test_an_error_retried_in_a_fresh_interpreter_still_ends_with_its_cause() -> None:
    """A RuntimeError before init may be the fork's doing: it is retried in fresh interpreters,
    which fail before importing distrain (no excepthook, no error file); the last line must
    still name the cause, not only "exited with code 1"."""
    early = {"FAILS_EARLY": "runtime-error"}
    res = distrain_run("-n", "2", str(SCRIPTS / "fails_early.py"), timeout=120, env=early)
    assert res.returncode == 1, res.stderr
    assert FALLBACK_LINE in res.stderr, res.stderr
    assert res.stderr.count("RuntimeError: the licence server refused this host") >= 2, (
        res.stderr
    )  # live traceback too
    last = res.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("distrain run: job failed: rank ")
        and "RuntimeError: the licence server refused this host" in last
    ), last
