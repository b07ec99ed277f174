"""What the all-ranks doctor says about a 2-node link at several speeds (namespaces + tc tbf).

    sudo python3 benchmarks/comm/links_doctor.py --rates none,10gbit,1gbit,100mbit

For each rate: a 2-node `distrain run ... -m distrain.tools.doctor --json` (one process per node)
with the default model (25.6 M parameters, 0.25 s per step) and with --model-params/--step-time if
given after `--`; prints the measured link (Mbit/s, round trip) and the verdict line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import PY, SRC, TESTS, loadavg  # noqa: E402

sys.path.insert(0, str(TESTS))
from helpers.netns_hosts import hosts  # noqa: E402  (the tests' namespace fixture, reused)


def main() -> int:
    """One doctor run per rate."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="none,10gbit,1gbit,100mbit")
    ap.add_argument("doctor_args", nargs="*", help="more doctor options (after --)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"load before: {loadavg()}", flush=True)
    with hosts(2) as net, tempfile.TemporaryDirectory() as tmp:
        for k, rate in enumerate(args.rates.split(",")):
            net.shape(None if rate == "none" else rate)
            outs = [Path(tmp) / f"{rate}{i}.json" for i in range(2)]
            procs = [
                net.start(
                    i,
                    [
                        PY,
                        "-m",
                        "distrain.cli",
                        "run",
                        "--nnodes",
                        "2",
                        "--node-rank",
                        str(i),
                        "--master-addr",
                        net.addrs[0],
                        "--master-port",
                        str(29700 + k),
                        "-n",
                        "1",
                        "-m",
                        "distrain.tools.doctor",
                        "--json",
                        "--bandwidth-bytes",
                        "1M",
                        *args.doctor_args,
                    ],
                    outs[i],
                    env={"PYTHONPATH": str(SRC)},
                    err_log=outs[i].with_suffix(".err"),
                )
                for i in range(2)
            ]
            for proc in procs:
                proc.wait(timeout=600)
            text = outs[0].read_text()
            doc = json.loads(text[text.index("{") :])
            links = next(c for c in doc["checks"] if c["id"] == "ranks.links")
            (link,) = links["data"]["links"]
            print(
                f"{rate:8s} {link['bytes_per_s'] * 8 / 1e6:8.0f} Mbit/s  rtt {link['rtt_us']:6.0f} "
                f"us  {links['status']}: {links['seen']}",
                flush=True,
            )
            if links["fix"]:
                print(f"{'':8s} fix: {links['fix']}", flush=True)
    print(f"load after: {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
