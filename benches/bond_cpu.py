#!/usr/bin/env python3
"""The bonding tunnel's CPU ceiling, beside plain forwarding over the same veth, in one run.

    cargo build --release && sudo python3 benches/bond_cpu.py

Runs `pathlab lab benches/bond-cpu.toml` (namespaces: site - srv over one veth with no
rate limit): one CUBIC flow straight to the server for 8 s, then one through
`pathlab bond` (ChaCha20-Poly1305, one line) for 10 s. Prints each flow's steady goodput
(the median one-second interval) and the ratio of the two, and the CPU time the tunnel's
client and server spent while the tunnel's flow ran (user + system, from /proc/PID/stat),
as inner bytes carried per CPU-second of each.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")
TICKS = os.sysconf("SC_CLK_TCK")


def steady_mbit(path):
    with open(path) as f:
        report = json.load(f)
    intervals = sorted(b * 8 / 1e6 for b in report["up"][0]["interval_bytes"][1:-1])
    return intervals[len(intervals) // 2]


def total_bytes(path):
    with open(path) as f:
        report = json.load(f)
    return sum(report["up"][0]["interval_bytes"])


def command_lines():
    """Every process's command line, by pid."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[int(pid)] = f.read().split(b"\0")
        except OSError:
            pass
    return found


def cpu_seconds(pid):
    """User + system time of a process so far, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def find(commands, *words):
    """The pid of this benchmark's pathlab process whose arguments hold all `words`."""
    for pid, argv in commands.items():
        if argv and argv[0] == PATHLAB.encode() and all(w.encode() in argv for w in words):
            return pid
    return None


def main():
    out = tempfile.mkdtemp(prefix="bond-cpu-")
    lab = subprocess.Popen(
        [PATHLAB, "lab", os.path.join(ROOT, "benches", "bond-cpu.toml"), "--out", out],
        stdout=subprocess.DEVNULL,
    )
    # Sample the tunnel ends' CPU time while the flow through the tunnel runs: from the
    # first poll that sees its TCP sender to the last.
    ends = {}
    first = last = None
    while lab.poll() is None:
        commands = command_lines()
        flow = find(commands, "tcp", "198.19.0.1")
        if flow is not None:
            for role, name in (("client", "bench-site"), ("server", "bench-srv")):
                if role not in ends:
                    ends[role] = find(commands, "bond", name)
            sample = {role: cpu_seconds(pid) for role, pid in ends.items() if pid}
            if all(v is not None for v in sample.values()):
                first = first or (time.monotonic(), sample)
                last = (time.monotonic(), sample)
        time.sleep(0.05)
    if lab.returncode != 0:
        raise SystemExit(f"pathlab lab failed ({lab.returncode}); see {out}")
    direct = steady_mbit(os.path.join(out, "direct.out"))
    tunnel = steady_mbit(os.path.join(out, "tunnel.out"))
    print(f"plain veth: {direct:.0f} Mbit/s; through the tunnel: {tunnel:.0f} Mbit/s "
          f"(ratio {tunnel / direct:.3f}); results in {out}")
    if first and last and last[0] > first[0]:
        carried = total_bytes(os.path.join(out, "tunnel.out"))
        wall = last[0] - first[0]
        parts = []
        for role in ("client", "server"):
            busy = last[1].get(role, 0) - first[1].get(role, 0)
            if busy > 0:
                parts.append(f"{role} {busy / wall:.0%} of a core, "
                             f"{carried / busy / 1e6:.0f} MB per CPU-second")
        print("tunnel CPU: " + "; ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
