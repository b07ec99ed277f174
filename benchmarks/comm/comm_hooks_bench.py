"""Throughput with DDP communication hooks: tiny MLP and digits CNN, 2 ranks vs 1 process.

    python3 benchmarks/comm/comm_hooks_bench.py --rounds 3

Configurations (each rank 1 thread, synthetic batches, 80 timed steps after 15 warm-up ones;
PowerSGD compresses from step 10): 1 process; 2 ranks with no hook, bf16, fp16, PowerSGD rank 1.
Rounds interleave the configurations.  Prints median samples/s, the ratio to 1 process and to
2 ranks without a hook.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import PY, RUN, env  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "comm_hooks_worker.py")
CONFIGS = {
    "1 process": None,
    "2 ranks, no hook": "none",
    "2 ranks, bf16": "bf16",
    "2 ranks, fp16": "fp16",
    "2 ranks, powersgd": "powersgd:rank=1,start=10",
}


def one(model: str, config: str, out: Path) -> float:
    """Samples/s of one run."""
    hook = CONFIGS[config]
    if hook is None:
        cmd = [PY, WORKER, "--model", model, "--out", str(out)]
    else:
        cmd = [*RUN, "-n", "2", WORKER, "--model", model, "--hook", hook, "--out", str(out)]
    subprocess.run(cmd, env=env(), check=True, capture_output=True, timeout=600)
    return float(json.loads(out.read_text())["samples_per_s"])


def main() -> None:
    """Run the interleaved rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    names = list(CONFIGS)
    res: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for model in a.models.split(","):
                for config in names[r % len(names) :] + names[: r % len(names)]:
                    v = one(model, config, Path(tmp) / "r.json")
                    res.setdefault((model, config), []).append(v)
                    print(f"round {r + 1} {model} {config:20s} {v:8.0f} samples/s", flush=True)
    print("\nmedian samples/s; ratio to 1 process and to 2 ranks without a hook")
    for model in a.models.split(","):
        one_proc = statistics.median(res[(model, "1 process")])
        plain = statistics.median(res[(model, "2 ranks, no hook")])
        for config in names:
            med = statistics.median(res[(model, config)])
            print(
                f"  {model} {config:20s} {med:8.0f}  vs 1 process {med / one_proc:5.2f}  vs no "
                f"hook {med / plain:5.2f}"
            )


if __name__ == "__main__":
    main()
