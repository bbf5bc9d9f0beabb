#!/usr/bin/env python3
"""How a lab's cost grows with its emulated links: build time, memory, idle CPU, threads.

    cargo build --release && sudo python3 benches/lab_scale.py [LINKS...] [--spec SPEC]

For each LINKS (default 100 200 1000) it writes a star lab (router `r`, hosts h1..hN, each
host on its own emulated link `SPEC`, default `delay 1ms`) and runs `pathlab lab` on it:

- build: from the process's start to the start of the run's timeline
  (`started_unix_ns` in result.json), every namespace, veth, address, route and emulator
  made;
- RSS: the process's VmRSS once everything is built and idle (and VmHWM, its peak);
- idle CPU: user + system time of the whole process (/proc/PID/stat) over IDLE seconds in
  which no workload runs, as a share of one core;
- threads: /proc/PID/status Threads while idle;
- descriptors: the process's open files while idle (/proc/PID/fd), against what the run
  counted it would need (`pathlab_lab::descriptors`) and the limit it ran under
  (/proc/PID/limits: pathlab raises its own);
- ping: h1 to h2 through r, 40 echo requests 100 ms apart after the idle window; the RTT
  should be four one-way delays of SPEC (two links, both ways).

Labs run one at a time, each once the kernel has destroyed the previous one's namespaces
(which it does after the process ends); each prints one JSON line.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")
TICKS = os.sysconf("SC_CLK_TCK")


def star(links, spec, idle_s):
    lines = [
        f'name = "star{links}"',
        f'duration = "{idle_s + 8}s"',
        '[[node]]\nname = "r"\nkind = "router"',
    ]
    for host in range(1, links + 1):
        lines.append(f'[[node]]\nname = "h{host}"')
    for host in range(1, links + 1):
        lines.append(f'[[link]]\nbetween = ["r", "h{host}"]\nspec = "{spec}"')
    lines.append(
        '[[workload]]\nname = "across"\nkind = "ping"\nfrom = "h1"\nto = "h2"\n'
        f'start = "{idle_s + 2}s"\nduration = "4s"\ninterval = "100ms"'
    )
    return "\n".join(lines) + "\n"


def status(pid):
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    except OSError:
        return None
    return fields


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def open_files(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def open_files_limit(pid):
    """The soft limit on open files the process runs under."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


def kib(text):
    return int(text.split()[0])


def cleaning_namespaces():
    """Whether the kernel is destroying network namespaces now: a kworker running the
    `netns` workqueue (its name ends in `+netns` while it works)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip().endswith("+netns"):
                    return True
        except OSError:
            continue
    return False


def wait_for_namespace_cleanup(limit_s=600):
    """Waits until the kernel has destroyed the previous lab's namespaces (it does so
    after the process exits, under the same lock as building: a 3,000-link build that
    overlapped the previous 3,000-link lab's teardown took 49 s instead of 19 s); returns
    how long it waited."""
    start = time.monotonic()
    quiet_since = None
    while time.monotonic() - start < limit_s:
        if cleaning_namespaces():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 2.0:
            break
        time.sleep(0.2)
    return round(time.monotonic() - start, 1)


def measure(links, spec, idle_s, keep):
    settled_s = wait_for_namespace_cleanup()
    work = tempfile.mkdtemp(prefix=f"pathlab-scale-{links}-")
    spec_path = os.path.join(work, "star.toml")
    out = os.path.join(work, "out")
    with open(spec_path, "w") as f:
        f.write(star(links, spec, idle_s))
    launched = time.time()
    child = subprocess.Popen(
        [PATHLAB, "lab", spec_path, "--out", out],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Built once every emulator has its recording open; then idle until the ping.
    while child.poll() is None:
        try:
            done = sum(1 for n in os.listdir(out) if n.startswith("link-"))
        except OSError:
            done = 0
        if done == links:
            break
        time.sleep(0.1)
    seen_built = time.time()
    time.sleep(1.0)
    before = status(child.pid)
    cpu_before, at_before = cpu_seconds(child.pid), time.monotonic()
    time.sleep(idle_s)
    cpu_after, at_after = cpu_seconds(child.pid), time.monotonic()
    idle = status(child.pid)
    fds = open_files(child.pid)
    limit = open_files_limit(child.pid)
    stdout, stderr = child.communicate(timeout=600)
    ended = time.time()
    if child.returncode != 0:
        print(stdout, stderr, file=sys.stderr)
        raise SystemExit(f"pathlab lab failed with {links} links")
    with open(os.path.join(out, "result.json")) as f:
        data = json.load(f)
    run = find_run(data)
    build_s = run["started_unix_ns"] / 1e9 - launched
    ping = run["workloads"][0]["outcome"]
    ping = ping.get("data", ping)
    row = {
        "links": links,
        "spec": spec,
        "build_s": round(build_s, 2),
        "built_seen_s": round(seen_built - launched, 2),
        "rss_mb": round(kib(idle["VmRSS"]) / 1024, 1),
        "peak_rss_mb": round(kib(idle["VmHWM"]) / 1024, 1),
        "threads": int(idle["Threads"]),
        "open_files": fds,
        "open_files_limit": limit,
        "idle_cpu_pct": round(100 * (cpu_after - cpu_before) / (at_after - at_before), 1),
        "ping_sent": ping.get("sent"),
        "ping_received": ping.get("received"),
        "ping_rtt_min_ms": ping["rtt"]["min_ns"] / 1e6,
        "ping_rtt_p50_ms": ping["rtt"]["p50_ns"] / 1e6,
        "total_s": round(ended - launched, 1),
        "waited_for_previous_teardown_s": settled_s,
    }
    if keep:
        row["dir"] = work
    else:
        shutil.rmtree(work, ignore_errors=True)
    return row


def find_run(data):
    """The lab run inside a result file, wherever its envelope puts it."""
    if isinstance(data, dict):
        if "started_unix_ns" in data and "workloads" in data:
            return data
        for value in data.values():
            found = find_run(value)
            if found:
                return found
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("links", nargs="*", type=int, default=[100, 200, 1000])
    parser.add_argument("--spec", default="delay 1ms")
    parser.add_argument("--idle", type=int, default=10, help="seconds of idle measured")
    parser.add_argument("--keep", action="store_true", help="keep the output directories")
    args = parser.parse_args()
    for links in args.links:
        print(json.dumps(measure(links, args.spec, args.idle, args.keep)), flush=True)


if __name__ == "__main__":
    main()
