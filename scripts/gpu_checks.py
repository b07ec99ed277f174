"""The checks and the report of scripts/gpu-checks.sh: each subcommand reads what a step left in
the output folder, says in one line whether it holds, and exits non-zero when it does not.

    python3 scripts/gpu_checks.py gpu-tests                  # the GPU-only test ids, one a line
    python3 scripts/gpu_checks.py compare GPU.pt CPU.pt      # script's parameters, native vs --cpu
    python3 scripts/gpu_checks.py gpt LOG --device NAME --gpus N --batch B --block T
    python3 scripts/gpu_checks.py ratio A.log... -- B.log... --gpus N --batch B --block T
    python3 scripts/gpu_checks.py top TOP.json               # NVML columns on every rank
    python3 scripts/gpu_checks.py watchdog LOG               # the watchdog named the hung rank
    python3 scripts/gpu_checks.py report OUT                 # OUT/report.md: OUT/steps.tsv, logs
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: dense bf16 peak (TFLOP/s) by a part of the device name, most specific first (vendor data sheets)
PEAK_BF16_TFLOPS = (
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM ("NVIDIA H100 80GB HBM3")
    ("A100", 312.0),
)

#: tokens/s of `distrain run` against plain torchrun on the same script that counts as no overhead
SAME_SPEED = 0.97

#: relative parameter difference (‖a−b‖/‖b‖) under which a native GPU run and its --cpu
#: rehearsal count as the same training; GPU kernels (TF32, fp16 autocast, atomics) round
#: differently from CPU ones, so this is a tolerance, not bitwise equality
SAME_TRAINING = 1e-2


def gpu_tests() -> list[str]:
    """Test ids under tests/jobs that skip without a CUDA GPU (whole files or single tests)."""
    ids = []
    for path in sorted((REPO / "tests" / "jobs").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(REPO))
        needs_gpu = (
            r"skipif\(\s*(?:not torch\.cuda\.is_available\(\)|torch\.cuda\.device_count\(\) <)"
        )
        if re.search(r"^pytestmark = .*" + needs_gpu, text, re.M):
            ids.append(rel)
            continue
        markers = set(re.findall(r"^(\w+) = pytest\.mark\." + needs_gpu, text, re.M))
        names = "".join(f"|{name}\\b" for name in markers)
        decorator = r"@(?:pytest\.mark\." + needs_gpu + names + ")"
        for match in re.finditer(r"((?:^@.*\n)+)def (test_\w+)", text, re.M):
            if re.search(decorator, match.group(1)):
                ids.append(f"{rel}::{match.group(2)}")
    return ids


def compare(gpu_file: str, cpu_file: str) -> tuple[bool, str]:
    """Whether two saved state dicts hold the same training, and the figure that says so."""
    import torch

    a, b = (torch.load(f, map_location="cpu", weights_only=True) for f in (gpu_file, cpu_file))
    a, b = a.get("model", a), b.get("model", b)
    if list(a) != list(b):
        return False, f"different parameter names: {sorted(set(a) ^ set(b))[:4]}"
    diff = sum(float((a[k].double() - b[k].double()).norm() ** 2) for k in a) ** 0.5
    norm = sum(float(b[k].double().norm() ** 2) for k in b) ** 0.5
    rel = diff / max(norm, 1e-30)
    return (
        rel <= SAME_TRAINING,
        f"relative parameter difference {rel:.2e} (same training when ≤ {SAME_TRAINING:g})",
    )


def peak_tflops(device: str) -> float | None:
    """The device's dense bf16 peak from its name, or None for a device not in the table."""
    return next((peak for part, peak in PEAK_BF16_TFLOPS if part.lower() in device.lower()), None)


def gpt_figures(
    log: str, device: str, gpus: int, batch: int, block: int, size: str = "100m"
) -> dict[str, float]:
    """Steady tokens/s from the last two progress lines of examples/train_gpt.py, FLOPs per token
    (6 per parameter plus attention's 12·layers·width·context), MFU against the device's peak."""
    sizes = ast.literal_eval(
        re.search(
            r"^SIZES = (\{.*?\})", (REPO / "examples" / "train_gpt.py").read_text(), re.M
        ).group(1)
    )
    layers, _, width = sizes[size]
    params = float(re.search(r"GPT ([\d.]+) M parameters", log).group(1)) * 1e6
    rows = [
        (int(s), float(r.replace(",", "")))
        for s, r in re.findall(r"step (\d+)/\d+ .* ([\d,]+) tokens/s", log)
    ]
    if len(rows) < 2:
        raise ValueError("fewer than two progress lines: no steady-state rate")
    per_step = batch * block * gpus
    (s0, r0), (s1, r1) = rows[-2], rows[-1]
    # the lines carry cumulative rates since the first step: their times give the interval's rate
    rate = (s1 - s0) * per_step / (s1 * per_step / r1 - s0 * per_step / r0)
    flops_per_token = 6 * params + 12 * layers * width * block
    figures = {"params": params, "tokens_per_s": rate, "flops_per_token": flops_per_token,
               "achieved_tflops": rate * flops_per_token / 1e12}  # fmt: skip
    peak = peak_tflops(device)
    if peak:
        figures["peak_tflops"] = peak * gpus
        figures["mfu"] = figures["achieved_tflops"] / figures["peak_tflops"]
    return figures


def speed_ratio(
    ours: list[str], theirs: list[str], gpus: int, batch: int, block: int
) -> tuple[bool, str]:
    """Median steady tokens/s of the `ours` logs against the `theirs` logs (same script, loop)."""
    import statistics

    def rates(logs: list[str]) -> list[float]:
        return [
            gpt_figures(Path(log).read_text(), "", gpus, batch, block)["tokens_per_s"]
            for log in logs
        ]

    a, b = rates(ours), rates(theirs)
    ratio = statistics.median(a) / statistics.median(b)
    runs = " ".join(f"{r:,.0f}" for r in a), " ".join(f"{r:,.0f}" for r in b)
    return ratio >= SAME_SPEED, (
        f"distrain run {statistics.median(a):,.0f} tokens/s ({runs[0]}) vs torchrun "
        f"{statistics.median(b):,.0f} ({runs[1]}): {ratio:.3f}x (goal ≥ {SAME_SPEED})"
    )


def top_nvml(path: str) -> tuple[bool, str]:
    """Whether `distrain top --json` shows NVML's GPU utilisation and memory for every rank."""
    ranks = json.loads(Path(path).read_text())["ranks"]
    ok = bool(ranks) and all(
        r.get("gpu_util") is not None and (r.get("gpu_mem") or 0) > 0 for r in ranks
    )
    cols = ", ".join(
        f"rank {r.get('rank')}: {r.get('gpu_util')} % / {(r.get('gpu_mem') or 0) / 2**20:.0f} MiB"
        for r in ranks
    )
    return ok, f"{len(ranks)} rank(s); GPU util / memory: {cols or 'none'}"


def watchdog(log: str) -> tuple[bool, str]:
    """Whether the watchdog's verdict line came and names a stuck rank."""
    verdict = "distrain watchdog: no training progress"
    line = next((line for line in log.splitlines() if line.startswith(verdict)), "")
    return "stuck: rank" in line, line or "no watchdog verdict in the log"


def _tail(path: Path, n: int = 6) -> str:
    return (
        "\n".join(path.read_text(errors="replace").splitlines()[-n:])
        if path.exists()
        else "(no log)"
    )


def report(out: Path) -> Path:
    """Write out/report.md: the machine, each step's outcome and time, then each step's log tail."""
    rows = [
        line.split("\t") for line in (out / "steps.tsv").read_text().splitlines() if line.strip()
    ]
    failed = [r[0] for r in rows if r[1] not in ("ok", "skipped")]
    skipped = sum(r[1] == "skipped" for r in rows)
    lines = ["# GPU checks", "", f"Command: `bash scripts/gpu-checks.sh` (output in `{out}`).", "",
             "```", _tail(out / "machine.log", 20), "```", "",
             f"**{len(rows) - len(failed) - skipped} of {len(rows)} steps ok, {skipped} skipped**"
             + (f"; not ok: {', '.join(failed)}" if failed else ""), "",
             "| step | outcome | exit | seconds | result |", "|---|---|---|---|---|"]  # fmt: skip
    for name, status, code, seconds, *note in rows:
        result = (
            (out / f"{name}.result").read_text().strip()
            if (out / f"{name}.result").exists()
            else ""
        )
        lines.append(
            f"| {name} | {status} | {code} | {seconds} | {result or (note[0] if note else '')} |"
        )
    for name, *_ in rows:
        lines += ["", f"## {name}", "", "```", _tail(out / f"{name}.log"), "```"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str]) -> int:
    """Run one subcommand; 0 when its check holds."""
    cmd, args = argv[0], argv[1:]
    if cmd == "gpu-tests":
        print("\n".join(gpu_tests()))
        return 0
    if cmd == "report":
        print(report(Path(args[0])))
        return 0
    if cmd == "gpt":
        opts = dict(zip(args[1::2], args[2::2], strict=False))
        fig = gpt_figures(
            Path(args[0]).read_text(),
            opts["--device"],
            int(opts["--gpus"]),
            int(opts["--batch"]),
            int(opts["--block"]),
        )
        mfu = (
            f", MFU {fig['mfu']:.1%} of {fig['peak_tflops']:.0f} TFLOP/s bf16 peak"
            if "mfu" in fig
            else ", MFU: device not in the peak table"
        )
        print(
            f"{fig['tokens_per_s']:,.0f} tokens/s, {fig['flops_per_token'] / 1e6:.0f} MFLOP/token, "
            f"{fig['achieved_tflops']:.1f} TFLOP/s{mfu}"
        )
        return 0
    if cmd == "ratio":
        cut = args.index("--")
        rest = args[cut + 1 :]
        first_opt = next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))
        logs = rest[:first_opt]
        opts = dict(zip(rest[first_opt::2], rest[first_opt + 1 :: 2], strict=False))
        ok, line = speed_ratio(args[:cut], logs, int(opts["--gpus"]), int(opts["--batch"]),
                               int(opts["--block"]))  # fmt: skip
        print(line)
        return 0 if ok else 1
    ok, line = {"compare": lambda: compare(*args), "top": lambda: top_nvml(args[0]),
                "watchdog": lambda: watchdog(Path(args[0]).read_text(errors="replace")),
                }[cmd]()  # fmt: skip
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
