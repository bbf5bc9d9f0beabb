#!/usr/bin/env python3
"""The bonding tunnel's memory over a long run: does either end's RSS grow?

    cargo build --release && sudo python3 benches/bond_soak.py [--minutes 30 | --quick]

Runs `pathlab lab` on a spec it writes, the `bond` recipe's shape (site - isp0/isp1/isp2 -
srv; lines of 8, 4 and 2 Mbit/s up at one-way 10, 20 and 40 ms, modem buffers of about
0.6 s): a `pathlab bond` server and client, and through the tunnel a steady load below
what the lines carry, `owd` probes of 1200 bytes at 3 Mbit/s (UDP, about 310 inner
packets a second), for MINUTES (30; --quick: 2). Now and then (seeded; on average every
FLAP s, 60, or a sixth of the run if shorter) one line dies both ways for 2-8 s and comes
back, one at a time, so two lines are always up and the load always fits.

Every 10 s it reads both tunnel ends' VmRSS from /proc/PID/status. At the end it prints,
per end, the RSS at the load's start, at its end and the most, and the slope of the
least-squares line through the samples after the first WARMUP s of load (60, or a quarter
of a shorter run: the ends' buffers and queues fill in the first seconds), in MB (10^6
bytes) per hour; and how much of the load arrived. The samples go to rss.json in the
output directory (the lines' recordings are deleted unless --keep).

With --rekey-after TIME both ends roll their keys over that often (`bond --rekey-after`;
the tunnel's default is 120s): every SAMPLE_S it also reads both ends' `pathlab bond stats`
(in the end's namespace), and at the end it prints the rekeys each end counted and the
sessions: the client's session id must never change, its reconnects stay 0 and the server
open one session, or the run failed ("no session lost"); with rekeys asked for, each end
must count at least 90% of the run's length over TIME.

It exits 1 if either end's slope is above --bound MB per hour (default 5). A leak of one
36-byte allocation per inner packet at this load is 40 MB per hour; a healthy end is flat
once warm (--quick here: 6.93 MB to 6.94 at the server, 6.98 to 7.11 at the client, all
of it in the first 20 s; slopes 0.00 and 0.26), but RSS moves in pages and the allocator's
chunks, and one 64 KB step in the last minute of a 2-minute run reads as 4 MB per hour.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bond_cpu import command_lines  # noqa: E402  one reader of /proc for both benches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")
SAMPLE_S = 10
LOAD_START_S = 4
LINES = [("8mbit", 400, 10), ("4mbit", 200, 20), ("2mbit", 100, 40)]


def line_specs(k):
    rate, limit, delay = LINES[k]
    return (f"delay {delay}ms rate {rate} limit {limit}", f"delay {delay}ms rate 50mbit limit 1000")


def flaps(seconds, mean_s, seed):
    """(start, length, line) of each line failure: one at a time, seeded."""
    rng = random.Random(seed)
    found = []
    at = LOAD_START_S + 10.0
    while True:
        at += max(5.0, rng.expovariate(1.0 / mean_s))
        length = rng.uniform(2.0, 8.0)
        if at + length > LOAD_START_S + seconds - 5:
            return found
        found.append((at, length, rng.randrange(len(LINES))))
        at += length


# Seconds the run goes on after the load ends, for its results to come back.
RESULTS_MARGIN_S = 30


def site_spec(name, duration_s, lines):
    """The first lines of a lab spec of the `bond` recipe's shape, site - isp0..ispN-1 - srv:
    link k (site - ispK) with `lines[k]` = (SPEC up, SPEC down), links N + k (ispK - srv)
    plain cables. So the site is 198.18.k.1 on line k and the server 198.18.(N+k).2 behind
    it."""
    out = [f'name = "{name}"', f'duration = "{duration_s}s"', '[[node]]\nname = "site"']
    out += [f'[[node]]\nname = "isp{k}"\nkind = "router"' for k in range(len(lines))]
    out.append('[[node]]\nname = "srv"')
    for k, (up, down) in enumerate(lines):
        out.append(f'[[link]]\nbetween = ["site", "isp{k}"]\nspec = "{up}"\nreverse = "{down}"')
    out += [f'[[link]]\nbetween = ["isp{k}", "srv"]' for k in range(len(lines))]
    return out


def spec(seconds, rate, names, failures, rekey_after=None):
    # The load's results come back after its end: a 30-minute owd test's records took
    # more than the 3 s first given here, and the run ended under it.
    out = site_spec("bond-soak", LOAD_START_S + seconds + RESULTS_MARGIN_S,
                    [line_specs(k) for k in range(len(LINES))])
    # The server listens on its end of the link to isp0 (link 3: 198.18.3.2); the site
    # reaches it over each line through that line's router.
    lines = ["--line", "to-isp0"]
    for k in range(1, len(LINES)):
        lines += ["--line", f"to-isp{k},via=198.18.{k}.2"]
    rekey = ["--rekey-after", rekey_after] if rekey_after else []
    commands = {
        "key": (0, 1, ["{pathlab}", "bond", "key", "{out}/bond.key"]),
        "bond-server": (1, None, ["{pathlab}", "bond", "server", "--listen", "198.18.3.2:7000",
                                  "--psk", "{out}/bond.key", "--address", "198.19.0.1/24",
                                  "--name", names["server"], *rekey, "-J"]),
        "client": (2, None, ["{pathlab}", "bond", "client", "198.18.3.2:7000", *lines,
                             "--psk", "{out}/bond.key", "--address", "198.19.0.2/24",
                             "--name", names["client"], *rekey, "-J"]),
    }
    for name, (start, duration, argv) in commands.items():
        node = "site" if name == "client" else "srv"
        text = (f'[[workload]]\nname = "{name}"\nkind = "command"\nfrom = "{node}"\n'
                f'start = "{start}s"\n')
        if duration:
            text += f'duration = "{duration}s"\n'
        out.append(text + "command = " + json.dumps(argv))
    out.append(
        f'[[workload]]\nname = "load"\nkind = "owd"\nfrom = "site"\nto = "srv"\n'
        f'address = "198.19.0.1"\nrate = "{rate}"\nstart = "{LOAD_START_S}s"\n'
        f'duration = "{seconds}s"'
    )
    for at, length, k in failures:
        up, down = line_specs(k)
        out.append(f'[[event]]\nat = "{at:.1f}s"\nlink = "site-isp{k}"\nspec = "loss 100%"')
        out.append(f'[[event]]\nat = "{at + length:.1f}s"\nlink = "site-isp{k}"\n'
                   f'spec = "{up}"\nreverse = "{down}"')
    return "\n".join(out) + "\n"


def find(commands, *words):
    """The pid of this benchmark's pathlab process whose arguments hold all `words`."""
    for pid, argv in commands.items():
        if argv and argv[0] == PATHLAB.encode() and all(w.encode() in argv for w in words):
            return pid
    return None


def rss_mb(pid):
    """VmRSS in MB (10^6 bytes), or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        return None
    return None


def bond_stats(pid, name):
    """The tunnel end `name`'s `pathlab bond stats -J`, read in the namespace of its
    process `pid` (its stats socket is named for its namespace), or None."""
    try:
        out = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", PATHLAB, "bond", "stats",
                              "--name", name, "-J"], capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None


def session_figures(stats):
    """(session ids, rekeys, reconnects, sessions opened) of one stats snapshot."""
    sessions = stats.get("sessions", [])
    ids = [s["session"] for s in sessions]
    rekeys = sum(s["counters"].get("rekeys", 0) for s in sessions)
    reconnects = sum(s["counters"].get("reconnects", 0) for s in sessions)
    opened = (stats.get("server") or {}).get("sessions_opened")
    return ids, rekeys, reconnects, opened


def check_sessions(last, seen_ids, seconds, rekey_after_s):
    """Prints each end's rekeys and sessions; returns whether a session was lost or the
    rekeys fell short."""
    failed = False
    for role in ("server", "client"):
        if role not in last:
            print(f"{role}: no stats read")
            failed = True
            continue
        ids, rekeys, reconnects, opened = session_figures(last[role])
        print(f"{role}: sessions {sorted(seen_ids[role])} over the run, rekeys {rekeys}, "
              f"reconnects {reconnects}" + (f", sessions opened {opened}" if opened is not None
                                             else ""))
        if len(seen_ids[role]) != 1 or reconnects or (opened is not None and opened != 1):
            print(f"{role}: a session was lost")
            failed = True
        if rekey_after_s and rekeys < 0.9 * seconds / rekey_after_s:
            print(f"{role}: {rekeys} rekeys, fewer than 90% of {seconds / rekey_after_s:.0f}")
            failed = True
    return failed


def slope_per_hour(points):
    """The least-squares slope of (seconds, MB) points, in MB per hour."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (y - mean_y) for t, y in points)
    return cov / var * 3600 if var else float("nan")


def load_figures(out):
    """(sent, received) probes of the load, from the lab's result."""
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    for workload in result["result"]["data"]["workloads"]:
        if workload["name"] == "load":
            outcome = workload["outcome"]
            if outcome["kind"] != "owd":
                return None, f"the load failed: {outcome}"
            sequence = outcome["data"]["sequence"]
            return (sequence["sent"], sequence["received"]), None
    return None, "no load in the result"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the load")
    parser.add_argument("--quick", action="store_true", help="2 minutes")
    parser.add_argument("--rate", default="3mbit", help="the load (owd probes' UDP payload)")
    parser.add_argument("--flap", type=float, default=60.0,
                        help="mean seconds between line failures")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds of load left out of the slope (at most a quarter)")
    parser.add_argument("--bound", type=float, default=5.0,
                        help="the most RSS slope allowed, MB per hour")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--rekey-after", metavar="SECONDS", type=int,
                        help="both ends' --rekey-after (at least 10)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the lines' recordings (hundreds of MB over 30 minutes)")
    args = parser.parse_args()
    seconds = int((2.0 if args.quick else args.minutes) * 60)
    failures = flaps(seconds, min(args.flap, seconds / 6), args.seed)
    warmup = min(args.warmup, seconds / 4)
    names = {"server": f"soak-srv-{os.getpid()}", "client": f"soak-site-{os.getpid()}"}
    out = tempfile.mkdtemp(prefix="bond-soak-")
    spec_path = os.path.join(out, "bond-soak.toml")
    with open(spec_path, "w") as f:
        f.write(spec(seconds, args.rate, names, failures,
                     f"{args.rekey_after}s" if args.rekey_after else None))
    print(f"{seconds / 60:g} minutes of {args.rate} through the tunnel, {len(failures)} line "
          f"failures; samples every {SAMPLE_S} s; results in {out}", flush=True)
    lab = subprocess.Popen([PATHLAB, "lab", spec_path, "--out", os.path.join(out, "run")],
                           stdout=subprocess.DEVNULL)
    started = time.monotonic()
    pids = {}
    samples = {"server": [], "client": []}
    last_stats = {}
    seen_ids = {"server": set(), "client": set()}
    next_sample = started + LOAD_START_S
    try:
        while lab.poll() is None:
            now = time.monotonic()
            if now >= next_sample:
                commands = command_lines()
                for role in samples:
                    pids[role] = pids.get(role) or find(commands, "bond", names[role])
                    value = rss_mb(pids[role]) if pids[role] else None
                    if value is not None:
                        samples[role].append((now - started - LOAD_START_S, value))
                        stats = bond_stats(pids[role], names[role])
                        if stats is not None:
                            last_stats[role] = stats
                            seen_ids[role].update(i for i in session_figures(stats)[0] if i)
                next_sample += SAMPLE_S
            time.sleep(0.2)
    except KeyboardInterrupt:
        lab.terminate()
        lab.wait()
        raise
    if lab.returncode != 0:
        raise SystemExit(f"pathlab lab failed ({lab.returncode}); see {out}")
    run = os.path.join(out, "run")
    if not args.keep:
        for name in os.listdir(run):
            if name.startswith("link-") and name.endswith(".jsonl"):
                os.remove(os.path.join(run, name))
    with open(os.path.join(out, "rss.json"), "w") as f:
        json.dump({"seconds": seconds, "rate": args.rate, "failures": failures,
                   "sample_s": SAMPLE_S, "warmup_s": warmup, "samples_mb": samples,
                   "rekey_after_s": args.rekey_after, "last_stats": last_stats}, f)

    failed = False
    print(f"{'end':8}{'start MB':>10}{'end MB':>10}{'max MB':>10}{'slope MB/h':>12}  samples")
    for role, points in samples.items():
        if len(points) < 3:
            print(f"{role:8} too few samples ({len(points)}): did it run?")
            failed = True
            continue
        # Only while the load runs: after it the owd test's records come back through
        # the tunnel in a burst (37,500 of them in --quick), which the ends' buffers take
        # in one step (0.4 MB each), and that is the load's end, not a slope.
        warm = [p for p in points if warmup <= p[0] <= seconds]
        slope = slope_per_hour(warm)
        print(f"{role:8}{points[0][1]:10.2f}{points[-1][1]:10.2f}"
              f"{max(y for _, y in points):10.2f}{slope:12.2f}  {len(points)} "
              f"({len(warm)} from {warmup:g} s to the load's end)")
        if not slope <= args.bound:
            print(f"{role}: RSS grows {slope:.2f} MB per hour, above the bound of {args.bound:g}")
            failed = True
    if check_sessions(last_stats, seen_ids, seconds, args.rekey_after):
        failed = True
    figures, error = load_figures(run)
    if error:
        print(error)
        failed = True
    else:
        sent, received = figures
        print(f"load: {received} of {sent} probes arrived "
              f"({100 * (1 - received / sent):.2f}% lost)" if sent else f"load: {figures}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
