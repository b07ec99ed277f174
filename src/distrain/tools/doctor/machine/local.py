"""Run every probe of this machine concurrently, each bounded in time, in a fixed order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from distrain.tools.doctor.check import Check
from distrain.tools.doctor.machine import container, gpu, limits, network, tools, torch_build

#: the longest one probe family may take before it is reported as hung
PROBE_TIMEOUT_S = 15.0


@dataclass
class Options:
    """What the user asked the local checks to look at."""

    master_addr: str | None = None
    master_port: int | None = None
    ports: tuple[int, ...] = network.DEFAULT_PORTS
    expect_gpu: bool = False


def _families(opts: Options) -> list[tuple[str, Callable[[], list[Check]]]]:
    runtime = container.detect_container()["runtime"]

    def gpu_probe() -> list[Check]:
        return gpu.probe(expect_gpu=opts.expect_gpu, in_container=runtime is not None)

    def limits_probe() -> list[Check]:
        return limits.probe(has_gpu=gpu.nvml_snapshot(timeout=2.0).get("state") == "ok")

    return [
        ("torch", torch_build.probe),
        ("gpu", gpu_probe),
        ("container", lambda: container.probe()[0]),
        ("network", lambda: network.probe(opts.master_addr, opts.master_port, opts.ports)),
        ("limits", limits_probe),
        ("tools", tools.probe),
    ]


def run_checks(opts: Options, timeout: float = PROBE_TIMEOUT_S) -> list[Check]:
    """All local checks, grouped in a fixed order; a crashed or hung probe becomes a warn check."""
    families = _families(opts)
    results: dict[str, list[Check]] = {}

    def runner(name: str, fn: Callable[[], list[Check]]) -> None:
        try:
            results[name] = fn()
        except Exception as err:  # a probe bug must not hide the other findings
            results[name] = [
                Check(
                    f"{name}.probe",
                    name,
                    name,
                    "warn",
                    f"probe failed: {type(err).__name__}: {err}",
                    "Please report this as a distrain bug.",
                )
            ]

    threads = []
    for name, fn in families:
        t = threading.Thread(target=runner, args=(name, fn), daemon=True, name=f"doctor-{name}")
        t.start()
        threads.append((name, t))
    deadline = time.monotonic() + timeout
    out: list[Check] = []
    for name, t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive() or name not in results:
            out.append(
                Check(
                    f"{name}.probe",
                    name,
                    name,
                    "warn",
                    f"no answer within {timeout:g} s",
                    "Something on this machine blocks (driver, DNS, filesystem); run the probe "
                    "again to see which.",
                )
            )
        else:
            out.extend(results[name])
    return out
