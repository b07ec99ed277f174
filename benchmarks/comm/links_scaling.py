"""`distrain bench scaling` on 1 node and on 2 namespace nodes, at several link speeds (tc tbf).

    sudo python3 benchmarks/comm/links_scaling.py --rates 100mbit,1gbit,10gbit --epochs 3

Two network namespaces joined by a bridge (tests/helpers/netns_hosts.py) stand for two machines; for
each rate the links are limited with ``tc ... tbf`` on both veth ends and one study runs:
``distrain bench scaling --nproc 1 --nodes 1,2 --node-exec 'ip netns exec NS{node}' ...``
(1 node × 1 process against 2 nodes × 1 process, the default workload).  Each study's report
is in OUT/<rate>/report.md; the combined table (``python -m distrain.tools.bench.study.nodes
combine``) is printed at the end.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import PY, TESTS, env, loadavg  # noqa: E402

sys.path.insert(0, str(TESTS))
from helpers.netns_hosts import hosts  # noqa: E402  (the tests' namespace fixture, reused)

LABELS = {
    "100mbit": "100 Mbit/s",
    "1gbit": "1 Gbit/s",
    "10gbit": "10 Gbit/s",
    "none": "unlimited veth",
}


def main() -> int:
    """One scaling study per link rate, then the combined table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rates", default="100mbit,1gbit,10gbit", help="tc rates, 'none' for an unlimited link"
    )
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default="bench-out/links")
    ap.add_argument(
        "bench_args", nargs="*", help="more `distrain bench scaling` options (after --)"
    )
    args = ap.parse_args()
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # unwind: the namespaces are deleted on the way out
    print(f"load before: {loadavg()}", flush=True)
    dirs = []
    with hosts(2) as net:
        prefix = net.names[0][:-1]
        for rate in args.rates.split(","):
            net.shape(None if rate == "none" else rate)
            out = Path(args.out) / rate
            cmd = [
                PY,
                "-m",
                "distrain.cli",
                "bench",
                "scaling",
                "--nproc",
                "1",
                "--nodes",
                "1,2",
                "--node-exec",
                f"ip netns exec {prefix}{{node}}",
                "--master-addr",
                net.addrs[0],
                "--link-label",
                LABELS.get(rate, rate),
                "--epochs",
                str(args.epochs),
                "--repeat",
                str(args.repeat),
                "--out",
                str(out),
                *args.bench_args,
            ]
            print("$ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, env=env(), check=True, timeout=3600)
            dirs.append(str(out))
    print(f"load after: {loadavg()}")
    print(
        subprocess.run(
            [PY, "-m", "distrain.tools.bench.study.nodes", "combine", *dirs],
            env=env(),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
