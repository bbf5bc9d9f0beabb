#!/usr/bin/env python3
"""The bonding tunnel's CPU ceiling, beside plain forwarding over the same veth, in one run.

    cargo build --release && sudo python3 benches/bond_cpu.py

Runs `pathlab lab benches/bond-cpu.toml` (namespaces: site - srv over one veth with no
rate limit): one CUBIC flow straight to the server for 8 s, then one through
`pathlab bond` (ChaCha20-Poly1305, one line) for 10 s. Prints each flow's steady goodput
(the median one-second interval) and the ratio of the two.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")


def steady_mbit(path):
    with open(path) as f:
        report = json.load(f)
    intervals = sorted(b * 8 / 1e6 for b in report["up"][0]["interval_bytes"][1:-1])
    return intervals[len(intervals) // 2]


def main():
    out = tempfile.mkdtemp(prefix="bond-cpu-")
    subprocess.run(
        [PATHLAB, "lab", os.path.join(ROOT, "benches", "bond-cpu.toml"), "--out", out],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    direct = steady_mbit(os.path.join(out, "direct.out"))
    tunnel = steady_mbit(os.path.join(out, "tunnel.out"))
    print(f"plain veth: {direct:.0f} Mbit/s; through the tunnel: {tunnel:.0f} Mbit/s "
          f"(ratio {tunnel / direct:.3f}); results in {out}")


if __name__ == "__main__":
    sys.exit(main())
