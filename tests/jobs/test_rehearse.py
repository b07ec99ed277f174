"""Story 13: `distrain run --cpu` runs unmodified CUDA/NCCL scripts as N CPU processes.

Each GPU-only script in tests/gpu_scripts/ (written like the popular tutorials) runs unmodified
under ``distrain run --cpu -n N`` and must end with exactly the parameters of its hand-converted
CPU twin (``*_cpu.py``) run with the same N: both do the same float ops in the same order on
the same CPU with one thread per process, so equality is bitwise (``torch.equal``), not a
tolerance.  The start line and the end summary of mapped calls are checked on the way.  Each
script runs at one N, 2 or 3, so both sizes (and a world that is not a power of two) are covered.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import REPO, distrain_run, held_port, python, run
from helpers.torch_races import torch_exit_race

SCRIPTS = REPO / "tests" / "gpu_scripts"
BOOT = REPO / "src" / "distrain" / "worker" / "rehearse" / "boot"
pytestmark = pytest.mark.timeout(900)


def _streams(
    *args: str, env: dict[str, str] | None = None, timeout: float = 420, race: str = ""
) -> tuple[str, str]:
    """Run `distrain run *args`; it must exit 0, or, with `race` (a launcher of
    helpers/torch_races.py), end in torch's gloo exit race as that launcher reports it: the
    script's processes end through interpreter teardown (fresh interpreters, mp.spawn's
    children), where torch 2.14 can abort after the job's work is done."""
    res = distrain_run(*args, timeout=timeout, env=env)
    if not (race and torch_exit_race(res, race)):
        assert res.returncode == 0, (
            f"exit {res.returncode}\n{res.stdout[-2000:]}{res.stderr[-4000:]}"
        )
    return res.stdout, res.stderr


def assert_same_parameters(rehearsed: Path, twin: Path) -> None:
    a, b = torch.load(rehearsed, weights_only=True), torch.load(twin, weights_only=True)
    a, b = a.get("model", a), b.get("model", b)
    assert list(a) == list(b)
    for name in a:
        assert a[name].device.type == "cpu"
        assert torch.equal(a[name], b[name]), (
            f"{name} differs by {(a[name].double() - b[name].double()).abs().max()}"
        )


def check_lines(stderr: str, n: int, mapped: tuple[str, ...]) -> None:
    assert (
        f"distrain run --cpu: {n} CPU processes stand in for {n} GPUs; cuda → cpu, nccl → gloo"
        in stderr
    ), stderr[-3000:]
    summary = [
        line for line in stderr.splitlines() if line.startswith("distrain run --cpu: mapped in")
    ]
    assert len(summary) == 1, stderr[-3000:]
    for call in ("nccl → gloo",) + mapped:
        assert call in summary[0], summary[0]


@pytest.mark.parametrize("n", [3])
def test_torchrun_tutorial(tmp_path: Path, n: int) -> None:
    """LOCAL_RANK env, init_process_group("nccl"), set_device, .to(int), DDP(device_ids), metric."""
    (tmp_path / "gpu").mkdir(), (tmp_path / "cpu").mkdir()
    _, err = _streams(
        "--cpu", "-n", str(n), str(SCRIPTS / "ddp_torchrun.py"), "--out", str(tmp_path / "gpu")
    )
    _streams("-n", str(n), str(SCRIPTS / "ddp_torchrun_cpu.py"), "--out", str(tmp_path / "cpu"))
    check_lines(err, n, ("DDP(device_ids=...)", ".cuda()", ".to(cuda)", "synchronize"))
    assert_same_parameters(tmp_path / "gpu" / "final.pt", tmp_path / "cpu" / "final.pt")
    assert torch.equal(
        torch.load(tmp_path / "gpu" / "metric.pt"), torch.load(tmp_path / "cpu" / "metric.pt")
    )


@pytest.mark.parametrize("n", [2])
@pytest.mark.slow
def test_legacy_local_rank_in_fresh_interpreters(tmp_path: Path, n: int) -> None:
    """--local_rank on argv, torch.device("cuda", i), DDP(output_device); workers are fresh
    interpreters (--start-method spawn), so the rehearsal comes from the sitecustomize on
    PYTHONPATH."""
    (tmp_path / "gpu").mkdir(), (tmp_path / "cpu").mkdir()
    flags = ("--legacy-local-rank", "--start-method", "spawn")
    _, err = _streams(
        "--cpu",
        "-n",
        str(n),
        *flags,
        str(SCRIPTS / "legacy_launch.py"),
        "--out",
        str(tmp_path / "gpu"),
        race="distrain",
    )
    cpu = ("--out", str(tmp_path / "cpu"))
    _streams("-n", str(n), *flags, str(SCRIPTS / "legacy_launch_cpu.py"), *cpu, race="distrain")
    check_lines(err, n, ("DDP(output_device=...)", "set_device"))
    assert_same_parameters(tmp_path / "gpu" / "final.pt", tmp_path / "cpu" / "final.pt")


@pytest.mark.parametrize(
    "n", [2]
)  # 2 here, 3 in the torchrun tutorial and the classifier: both sizes stay covered
@pytest.mark.slow
def test_spawn_tutorial_with_device_count_world(tmp_path: Path, n: int) -> None:
    """mp.spawn(nprocs=torch.cuda.device_count()) with a master port set in the script: the
    script runs once and its N spawned children (fresh interpreters) are the job."""
    (tmp_path / "gpu").mkdir(), (tmp_path / "cpu").mkdir()
    _, err = _streams(
        "--cpu",
        "-n",
        str(n),
        str(SCRIPTS / "spawn_tutorial.py"),
        str(tmp_path / "gpu"),
        env={"TUTORIAL_PORT": str(held_port())},
        race="mp.spawn",
    )
    twin = run(
        [python(), str(SCRIPTS / "spawn_tutorial_cpu.py"), str(tmp_path / "cpu"), str(n)],
        timeout=420,
        env={"TUTORIAL_PORT": str(held_port())},
    )
    if not torch_exit_race(twin, "mp.spawn"):  # a child's abort in teardown, torch's own
        assert twin.returncode == 0, twin.stdout[-2000:] + twin.stderr[-3000:]
    check_lines(err, n, ("DDP(device_ids=...)",))
    assert re.search(
        r"spawn_tutorial\.py starts them itself: torch\.multiprocessing\.spawn at line "
        r"\d+; it runs once",
        err,
    ), err[-2000:]
    assert f"mapped in {n} processes" in err
    assert_same_parameters(tmp_path / "gpu" / "final.pt", tmp_path / "cpu" / "final.pt")


@pytest.mark.parametrize("n", [3])
def test_image_classifier_syncbn_amp(tmp_path: Path, n: int) -> None:
    """SyncBatchNorm + torch.cuda.amp.autocast / torch.amp.autocast("cuda") + GradScaler +
    pin_memory + DataLoader workers, against CPU autocast(float16), GradScaler("cpu") and
    distrain's CPU SyncBatchNorm."""
    (tmp_path / "gpu").mkdir(), (tmp_path / "cpu").mkdir()
    _, err = _streams(
        "--cpu", "-n", str(n), str(SCRIPTS / "image_classifier.py"), "--out", str(tmp_path / "gpu")
    )
    _streams("-n", str(n), str(SCRIPTS / "image_classifier_cpu.py"), "--out", str(tmp_path / "cpu"))
    check_lines(
        err,
        n,
        (
            "SyncBatchNorm → CPUSyncBatchNorm",
            "autocast(cuda) → autocast(cpu)",
            "GradScaler(cuda) → GradScaler(cpu)",
            "DataLoader(pin_memory=True) → off",
        ),
    )
    assert_same_parameters(tmp_path / "gpu" / "final.pt", tmp_path / "cpu" / "final.pt")
    extra_gpu, extra_cpu = (
        torch.load(tmp_path / d / "extra.pt", weights_only=True) for d in ("gpu", "cpu")
    )
    assert extra_gpu["scaler"] == extra_cpu["scaler"] and torch.equal(
        extra_gpu["correct"], extra_cpu["correct"]
    )


@pytest.mark.parametrize("n", [2])
def test_snapshot_resume_after_a_killed_worker(tmp_path: Path, n: int) -> None:
    """pytorch/examples' snapshot trainer: rank 1 is SIGKILLed in epoch 2, --max-restarts 1
    restarts the job, torch.load(map_location=f"cuda:{rank}") resumes it.  The twin goes through
    the same kill and resume: a resumed DDP job is not bitwise an uninterrupted one with 3 gloo
    ranks (DDP's first step after the restart uses its initial bucket layout, so gloo's ring sums
    some gradients in another order: 1 ulp), with or without the rehearsal."""
    results = {}
    for name, script, flags in (
        ("gpu", "snapshot_trainer.py", ["--cpu"]),
        ("cpu", "snapshot_trainer_cpu.py", []),
    ):
        (tmp_path / name).mkdir()
        crash = tmp_path / f"crashed-{name}"
        out, err = _streams(
            *flags,
            "-n",
            str(n),
            "--max-restarts",
            "1",
            str(SCRIPTS / script),
            "--out",
            str(tmp_path / name),
            env={"CRASH_ONCE": str(crash)},
        )
        assert crash.exists() and "Resuming training from snapshot at Epoch 2" in out, out[-2000:]
        results[name] = err
    check_lines(results["gpu"], n, ("set_device", "torch.load(map_location=cuda)"))
    assert_same_parameters(tmp_path / "gpu" / "final.pt", tmp_path / "cpu" / "final.pt")


# -- what cannot be rehearsed, and the torch.cuda answers, in one plain fresh interpreter each ----
def rehearsed_python(code: str, tmp_path: Path, count: int = 2) -> tuple[int, str, str]:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(code))
    env = {
        "DISTRAIN_CPU_REHEARSAL": str(count),
        "PYTHONPATH": os.pathsep.join([str(BOOT), os.environ["PYTHONPATH"]]),
    }
    res = run([python(), str(script)], timeout=300, env=env, cwd=tmp_path)
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize(
    ("code", "call"),
    [
        ("import torch\ng = torch.cuda.CUDAGraph()\n", "torch.cuda.CUDAGraph() (CUDA graphs)"),
        ("import torch\nimport pynvml\npynvml.nvmlInit()\n", "pynvml.nvmlInit() (NVML)"),
        (
            "import torch\nfrom torch.utils.cpp_extension import load_inline\nload_inline('k', "
            "cpp_sources='', cuda_sources='__global__ void k() {}')\n",
            "torch.utils.cpp_extension.load_inline() of a CUDA extension",
        ),
        (
            "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef "
            "k(x):\n    pass\n\nk[(1,)](torch.zeros(1, device='cuda'))\n",
            "Triton kernel k",
        ),
    ],
    ids=["cuda-graph", "nvml", "cuda-extension", "triton"],
)
def test_what_needs_a_gpu_stops_with_one_line(tmp_path: Path, code: str, call: str) -> None:
    if "pynvml" in code:
        pytest.importorskip("pynvml")
    if "triton" in code:
        pytest.importorskip("triton")
    line = code.rstrip("\n").count("\n") + 1
    rc, _, err = rehearsed_python(code, tmp_path)
    assert rc == 3, err[-2000:]
    assert err.strip().splitlines() == [
        f"distrain run --cpu: cannot rehearse {call} at user_script.py:{line}: it needs a real GPU"
    ], err


def test_torch_cuda_answers_consistently(tmp_path: Path) -> None:
    rc, out, err = rehearsed_python(
        """
        import torch
        assert torch.cuda.is_available() and torch.cuda.device_count() == 3
        assert torch.cuda.is_initialized()
        torch.cuda.set_device(2)
        assert torch.cuda.current_device() == 2
        with torch.cuda.device(1):
            assert torch.cuda.current_device() == 1
        assert torch.cuda.current_device() == 2
        try:
            torch.cuda.set_device(3)
            raise SystemExit("set_device(3) of 3 devices worked")
        except torch.AcceleratorError:
            pass
        assert torch.cuda.get_device_name(0).startswith("CPU")
        assert torch.cuda.get_device_properties(0).total_memory > 0
        assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated() == 0
        torch.cuda.reset_peak_memory_stats(); torch.cuda.empty_cache(); torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(torch.cuda.Stream()):
            start.record(); torch.ones(3).cuda().sum(); end.record()
        assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
        torch.manual_seed(0); a = torch.rand(2)
        torch.manual_seed(0); torch.cuda.manual_seed_all(123); b = torch.rand(2)
        assert torch.equal(a, b), "cuda seeding changed the CPU stream"
        state = torch.cuda.get_rng_state(); torch.cuda.manual_seed(7)
        torch.cuda.set_rng_state(state)
        assert torch.cuda.initial_seed() == 123
        for dev in ("cuda", "cuda:1", torch.device("cuda", 2), 0):
            assert torch.zeros(2, device=dev).device.type == "cpu"
            assert torch.ones(2).to(dev).device.type == "cpu"
        with torch.device("cuda"):
            assert torch.nn.Linear(2, 2).weight.device.type == "cpu"
        torch.save({"w": torch.ones(2)}, "w.pt")
        for loc in ("cuda:1", torch.device("cuda:0"), {"cpu": "cuda:2"},
                    lambda s, loc: s.cuda(1), None):
            assert torch.load("w.pt", map_location=loc)["w"].device.type == "cpu"
        assert torch.accelerator.current_accelerator().type == "cuda"
        assert torch.accelerator.device_count() == 3
        print("ok")
        """,
        tmp_path,
        count=3,
    )
    assert rc == 0 and out.strip() == "ok", err[-3000:]


def test_legacy_types_generators_and_custom_autograd_functions(tmp_path: Path) -> None:
    rc, out, err = rehearsed_python(
        """
        import torch
        from torch.amp import custom_bwd, custom_fwd
        x = torch.cuda.FloatTensor(3).zero_()
        assert isinstance(x, torch.cuda.FloatTensor)
        assert torch.cuda.LongTensor([1, 2]).dtype == torch.int64
        assert x.type(torch.cuda.HalfTensor).dtype == torch.float16
        assert x.type("torch.cuda.DoubleTensor").dtype == torch.float64
        g = torch.Generator(device="cuda").manual_seed(5)
        assert isinstance(g, torch.Generator) and g.device.type == "cpu"
        assert isinstance(torch.default_generator, torch.Generator)
        assert torch.equal(torch.randn(4, device="cuda", generator=g),
                           torch.randn(4, generator=torch.Generator().manual_seed(5)))

        class Exact(torch.autograd.Function):  # the usual fp32 island inside mixed precision
            @staticmethod
            @custom_fwd(device_type="cuda", cast_inputs=torch.float32)
            def forward(ctx, a):
                honoured = a.dtype == torch.float32 and (a @ a.T).dtype == torch.float32
                assert honoured, "cast_inputs/autocast-off not honoured"
                return a * 2

            @staticmethod
            @custom_bwd(device_type="cuda")
            def backward(ctx, grad):
                return grad * 2

        with torch.autocast("cuda", dtype=torch.bfloat16):
            a = torch.randn(2, 2, device="cuda", requires_grad=True)
            assert (a @ a).dtype == torch.bfloat16
            Exact.apply(a.to(torch.bfloat16)).sum().backward()
        assert torch.equal(a.grad, torch.full((2, 2), 2.0))
        print("ok")
        """,
        tmp_path,
        count=2,
    )
    assert rc == 0 and out.strip() == "ok", err[-3000:]


def test_dry_run_and_bad_combinations() -> None:
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "--cpu",
            "-n",
            "2",
            "--dry-run",
            str(SCRIPTS / "ddp_torchrun.py"),
            "--out",
            "x",
        ],
        timeout=120,
        check=True,
    )
    assert "DISTRAIN_CPU_REHEARSAL=2" in res.stdout and str(BOOT) in res.stdout
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "--cpu",
            "--gpus",
            "0",
            str(SCRIPTS / "ddp_torchrun.py"),
        ],
        timeout=120,
    )
    assert (
        res.returncode == 2
        and "cannot be combined with --gpus" in res.stderr
        and "Traceback" not in res.stderr
    )


def test_sitecustomize_chains_to_the_one_it_shadows(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nos.environ['OTHER_SITECUSTOMIZE_RAN'] = '1'\n"
    )
    code = (
        "import os, sys; print(os.environ.get('OTHER_SITECUSTOMIZE_RAN'), 'torch' in sys.modules)"
    )
    env = {
        "DISTRAIN_CPU_REHEARSAL": "2",
        "PYTHONPATH": os.pathsep.join([str(BOOT), str(tmp_path), os.environ["PYTHONPATH"]]),
    }
    res = run([python(), "-c", code], timeout=120, env=env, check=True)
    assert res.stdout.split() == ["1", "False"], (
        res.stdout + res.stderr
    )  # and torch is not imported until the script does
