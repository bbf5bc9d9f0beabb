#!/usr/bin/env python3
"""The emulator's send lateness at 1 Gbit/s, idle and with a busy loop on every core, beside
the kernel's own wake-up latency (cyclictest) on the same machine and load.

    cargo build --release && sudo python3 benches/lateness.py [--seconds 10] [--runs 1]

Builds h1 - r - h2 as namespaces (veths, 198.18.0.0/15), runs `pathlab emulate --between`
in r with `rate 1gbit delay 40ms limit 6700` both ways, and one CUBIC flow from h1 to a `pathlab
server` in h2 for SECONDS. The figure is each direction's lateness p99 from `emulate stats
-J` (how late packets left against their model departure, the fidelity guard's measure),
for `--priority realtime` (the default) and `--priority normal`, each idle and under load
(one `while :; do :; done` per core, at normal priority). The reference is cyclictest
(`-m -p 80 -i 200`, Debian's rt-tests), run alone for SECONDS under the same load: no
emulator can wake more punctually than the kernel wakes a real-time thread. Every process
and namespace it made is removed at the end, whatever happens.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")
TAG = f"lat{os.getpid() % 100000}"
NS = {name: f"{TAG}-{name}" for name in ("h1", "r", "h2")}
# The queue holds one BDP (10 MB, 6,700 frames of 1514 bytes), as in the forwarding
# benchmark: with a shorter one, CUBIC's losses at 80 ms of RTT keep it far below the rate.
SPEC = "rate 1gbit delay 40ms limit 6700"


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def in_ns(ns, *args):
    return ["ip", "netns", "exec", NS[ns], *args]


def build():
    for ns in NS.values():
        sh("ip", "netns", "add", ns)
    # h1 a1 <-> ra r rb <-> b2 h2; r forwards nothing itself: the emulator bridges ra-rb.
    sh("ip", "link", "add", "a1", "netns", NS["h1"], "type", "veth", "peer", "ra", "netns", NS["r"])
    sh("ip", "link", "add", "rb", "netns", NS["r"], "type", "veth", "peer", "b2", "netns", NS["h2"])
    for ns, iface, addr in (("h1", "a1", "198.18.40.1/24"), ("h2", "b2", "198.18.40.2/24")):
        sh(*in_ns(ns, "ip", "addr", "add", addr, "dev", iface))
        sh(*in_ns(ns, "ip", "link", "set", iface, "up"))
        sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
    for iface in ("ra", "rb"):
        sh(*in_ns("r", "ip", "link", "set", iface, "up"))


def teardown(procs):
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for ns in NS.values():
        sh("ip", "netns", "del", ns, check=False)


def busy_loops():
    """One busy loop per core, at normal priority."""
    return [
        subprocess.Popen(["sh", "-c", "while :; do :; done"])
        for _ in range(os.cpu_count() or 1)
    ]


def stop(procs):
    for proc in procs:
        proc.kill()
        proc.wait()


def emulator_run(priority, seconds, procs):
    """One flow through the emulator at `priority`; returns (p99 forward, p99 reverse, max
    forward, goodput Mbit/s, what the emulator said of its scheduling)."""
    name = f"{TAG}-{priority}"
    emulate = subprocess.Popen(
        in_ns("r", PATHLAB, "emulate", "--name", name, "--between", "ra", "rb", SPEC,
              "--priority", priority, "--late-warn", "off", "-J"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(emulate)
    deadline = time.time() + 10
    while time.time() < deadline:
        if sh(PATHLAB, "emulate", "stats", "--name", name, "-J", check=False).returncode == 0:
            break
        time.sleep(0.1)
    # Socket buffers of several BDPs (80 ms at 1 Gbit/s is 10 MB), so the window never
    # limits the flow.
    result = sh(*in_ns("h1", PATHLAB, "tcp", "198.18.40.2", "-t", f"{seconds}s", "-C", "cubic",
                       "-w", "64M", "-J"), check=False)
    stats = json.loads(sh(PATHLAB, "emulate", "stats", "--name", name, "-J").stdout)
    emulate.send_signal(signal.SIGTERM)
    emulate.communicate(timeout=10)
    procs.remove(emulate)
    goodput = None
    try:
        report = json.loads(result.stdout)
        up = report["up"][0]
        goodput = sum(up["interval_bytes"]) * 8 / 1e6 / seconds
    except (ValueError, KeyError, IndexError):
        print(f"  tcp said: {result.stderr.strip()[:300]}", file=sys.stderr)
    forward, reverse = stats["directions"][0]["lateness"], stats["directions"][1]["lateness"]
    waited = [d["waited"]["p99_ns"] / 1e3 for d in stats["directions"]]
    scheduling = stats.get("scheduling") or {}
    return (forward["p99_ns"] / 1e3, reverse["p99_ns"] / 1e3, forward["max_ns"] / 1e3, goodput,
            f"{scheduling.get('policy')} {scheduling.get('priority')}, waited to be read p99 "
            f"{waited[0]:.0f}/{waited[1]:.0f} us")


def cyclictest_p99(seconds):
    """cyclictest's p99 and max wake-up latency, us, over every thread it ran."""
    out = sh("cyclictest", "-m", "-p", "80", "-i", "200", "-D", f"{seconds}s", "-q", "-h", "5000",
             "-t", str(os.cpu_count() or 1)).stdout
    counts = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split()
        us = int(fields[0])
        counts[us] = counts.get(us, 0) + sum(int(f) for f in fields[1:])
    total = sum(counts.values())
    largest = max((us for us, n in counts.items() if n), default=None)
    seen = 0
    for us in sorted(counts):
        seen += counts[us]
        if seen >= 0.99 * total:
            return us, largest
    return None, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--loads", default="idle,busy", help="idle, busy or both")
    parser.add_argument("--priorities", default="realtime,normal")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (namespaces and real-time scheduling)")
    if not shutil.which("cyclictest"):
        sys.exit("needs cyclictest: apt-get install rt-tests")
    procs = []
    try:
        build()
        server = subprocess.Popen(in_ns("h2", PATHLAB, "server"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        procs.append(server)
        time.sleep(0.5)
        rows = []
        for load in args.loads.split(","):
            loops = busy_loops() if load == "busy" else []
            try:
                time.sleep(0.5)
                cyc_p99, cyc_max = cyclictest_p99(args.seconds)
                for priority in args.priorities.split(","):
                    for run in range(args.runs):
                        fwd, rev, fwd_max, goodput, got = emulator_run(priority, args.seconds, procs)
                        rows.append((load, priority, run, fwd, rev, fwd_max, goodput, got,
                                     cyc_p99, cyc_max))
                        print(f"{load:5} {priority:8} run {run}: lateness p99 {fwd:7.0f} us "
                              f"forward, {rev:7.0f} us reverse (max {fwd_max:.0f}), "
                              f"{goodput or 0:6.0f} Mbit/s, threads {got}; cyclictest p99 "
                              f"{cyc_p99} us (max {cyc_max})", flush=True)
            finally:
                stop(loops)
        print()
        print("| load | --priority | lateness p99 forward | reverse | cyclictest p99 | ratio |")
        print("|---|---|---|---|---|---|")
        for load, priority, _, fwd, rev, _, _, _, cyc, _ in rows:
            ratio = f"{max(fwd, rev) / cyc:.1f}" if cyc else "-"
            print(f"| {load} | {priority} | {fwd:.0f} us | {rev:.0f} us | {cyc} us | {ratio} |")
    finally:
        teardown(procs)


if __name__ == "__main__":
    main()
