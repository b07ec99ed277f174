"""Why `distrain run --cpu` wraps a few functions instead of using a TorchFunctionMode.

    python3 benchmarks/rehearse/rehearse_mode_cost.py

Times a small op (``x.add(y)`` on 8 floats) and a wrapped factory (``torch.zeros(8)``) with no
interception, under a do-nothing TorchFunctionMode (what a mode costs every op), and with the
rehearsal's function wrapper on ``torch.zeros`` (what it costs the calls it wraps; other ops
pay nothing).  Interleaved rounds; prints the minimum µs per call of each.
"""

from __future__ import annotations

import time

import torch
from torch.overrides import TorchFunctionMode


class Passthrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))


def per_call(fn, n: int = 20000) -> float:  # noqa: ANN001
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from distrain.worker.rehearse.devices import _with_cpu_device

    x, y = torch.randn(8), torch.randn(8)
    zeros = _with_cpu_device(torch.zeros, "bench")
    res: dict[str, list[float]] = {
        k: [] for k in ("add", "add+mode", "zeros", "zeros+mode", "zeros+wrapper")
    }
    mode = Passthrough()
    for _ in range(10):
        res["add"].append(per_call(lambda: x.add(y)))
        res["zeros"].append(per_call(lambda: torch.zeros(8)))
        res["zeros+wrapper"].append(per_call(lambda: zeros(8)))
        with mode:
            res["add+mode"].append(per_call(lambda: x.add(y)))
            res["zeros+mode"].append(per_call(lambda: torch.zeros(8)))
    best = {k: min(v) for k, v in res.items()}
    print(f"# torch {torch.__version__}; load {open('/proc/loadavg').read().split()[:3]}")
    print("  ".join(f"{k} {v:.2f} µs" for k, v in best.items()))
    print(
        f"a TorchFunctionMode: add ×{best['add+mode'] / best['add']:.2f}, zeros "
        f"×{best['zeros+mode'] / best['zeros']:.2f}; "
        f"the rehearsal's wrapper: zeros ×{best['zeros+wrapper'] / best['zeros']:.2f}, add "
        "×1 (not wrapped)"
    )


if __name__ == "__main__":
    main()
