#!/usr/bin/env python3
"""One CUBIC flow over three unequal lines: Linux MPTCP against `pathlab bond`, in one run.

    cargo build --release -p pathlab && sudo python3 benches/bond_mptcp.py [--quick]
        [--seconds 30] [--pathlab PATH] [--out DIR] [--json FILE] [--keep]

Runs `pathlab lab` on a spec it writes: site - isp0/isp1/isp2 - srv, the `bond` recipe's
shape with lines of rates 4:1, 12, 6 and 3 Mbit/s up (50 Mbit/s down), one-way 5, 15 and
35 ms both ways, and tail-drop modem buffers of about a second (1000, 500 and 250
packets). Each phase's flow runs SECONDS (30; --quick: 10), one after the other:

1. each line alone: one CUBIC flow (`pathlab tcp`) to the server's address behind that
   line; the sum of the three is "the lines' plain-TCP sum";
2. Linux MPTCP: one CUBIC flow from a Python sender to a Python receiver
   (socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP), TCP_CONGESTION cubic), with a subflow
   per line: the in-kernel path manager's `subflow` endpoints on the site's second and
   third line addresses, `ip mptcp limits set subflows 3 add_addr_accepted 3` at both
   ends, and a routing table per source address (`ip rule from ADDR table N`) so each
   subflow leaves by its own line;
3. `pathlab bond` over the same three lines (delay controller), one CUBIC flow
   (`pathlab tcp`) through the tunnel, and the same host's RTT probes through the tunnel
   (`rtt` every 50 ms: another flow) while it runs.

Goodput is the receiver's bytes per one-second interval, averaged over the steady window
(from 3 s after the flow's start to 1 s before its end: a stall counts, so the mean and
not a median). MPTCP's seconds are bursty once its far subflow loses a packet in a full
modem buffer (in-order delivery waits for the retransmission, a second behind: seconds of
0 then of 40 Mbit/s), so where the window's edges cut such a burst moves its mean by a few
percent from run to run; the lines' own rates do not move. Each line's queue delay is the
ground truth of its emulator's recording (the time each upward packet waited in the
modem's queue, dequeued - arrived), p50/p95 (nearest rank) over the packets that arrived
in the same window. The per-flow-order
figure is the loaded probes' RTT p50/p95 against the fastest line's base RTT (`rtt`
probes across it, idle, before anything else runs).

It aborts (exit 1) with a message when the set-up is wrong: MPTCP disabled or its set-up
refused (at once: the lab is stopped), a flow that did not run, a line that carried under
a tenth of what it carries alone in the MPTCP or the bond phase (MPTCP fell back to one
path, or a subflow left by the wrong line), a line's flow alone that did not fit its rate.

Prints a Markdown table (rows: lines alone, MPTCP, bond; columns: goodput, share of the
sum, each line's queue p50/p95) and writes a JSON result (bond_mptcp.json in the output
directory, or --json). The lines' recordings are deleted unless --keep. The lab removes
its namespaces and programs when it ends, on Ctrl-C and after SIGKILL (then `pathlab lab
clean` removes what is left on disk).

The same script is also what runs inside the lab's namespaces (`setup`, `teardown`,
`send`, `receive`: internal, started by the spec it writes).
"""

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bond_cpu import command_lines  # noqa: E402  one reader of /proc for the benches
from bond_soak import site_spec  # noqa: E402  the `bond` recipe's topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.abspath(__file__)
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")

# (up Mbit/s, one-way delay ms, modem buffer packets: about a second of full frames)
LINES = [(12, 5, 1000), (6, 15, 500), (3, 35, 250)]
DOWN = "rate 50mbit limit 1000"
# Link k (site - ispK) is 198.18.k.0/24, the site .1, the router .2; link N + k (ispK -
# srv) is 198.18.(N+k).0/24 with srv at .2 (site_spec's numbering).
SITE = "198.18.{}.1"
ROUTER = "198.18.{}.2"


def server(k):
    """The server's address behind line k."""
    return f"198.18.{len(LINES) + k}.2"


# Where MPTCP's first subflow, the tunnel and the base RTT reach the server: behind line 0,
# the fastest.
SERVER = server(0)
MPTCP_PORT = 5301
TABLE_BASE = 100
IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
SOL_MPTCP = 284
MPTCP_INFO = 1
# Seconds left out of the start of each flow (slow start into a second of buffer), and of
# its end.
SKIP_S = 3
TAIL_S = 1
# Seconds between one phase's flow start and the next one's, beyond the flow's own.
PHASE_MARGIN_S = 4
# A line carrying less than this share of its goodput alone during MPTCP or the bond is a
# set-up error (a subflow that never opened, or left by another line).
LEAST_SHARE = 0.1
# What one CUBIC flow alone carries of a line's rate: a 1448-byte segment (MSS with
# timestamps) per 1514-byte Ethernet frame, as the emulator counts frames.
TCP_PAYLOAD_PER_FRAME = 1448 / 1514
# A line alone below this share of that is a run the emulators (a busy machine) spoiled.
ALONE_LEAST = 0.95
# Written by a set-up in a namespace that failed (MPTCP disabled, `ip` refused).
SETUP_FAILED = "mptcp-setup-failed"
# Issue 28: the host's own ping beside its bulk flow, RTT p95 at most the fastest line's
# base RTT plus this.
ORDER_BOUND_MS = 25.0


# ---------------------------------------------------------------------------------------
# In the namespaces: MPTCP's set-up, sender and receiver.


def ip(*args):
    """Runs `ip ARGS`, printing it; raises with its error output if it fails."""
    print("ip " + " ".join(args), flush=True)
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise SystemExit(f"`ip {' '.join(args)}` failed ({done.returncode}): "
                         f"{done.stderr.strip()}")


def mptcp_enabled():
    """net.mptcp.enabled of the calling process's network namespace."""
    try:
        with open("/proc/sys/net/mptcp/enabled") as f:
            return f.read().strip() == "1"
    except OSError as error:
        raise SystemExit(f"this kernel has no MPTCP (net.mptcp.enabled: {error})")


def setup(role):
    """MPTCP's limits at either end; at the site, an endpoint per further line address and
    a routing table per source address, so each subflow leaves by its own line."""
    if not mptcp_enabled():
        raise SystemExit("net.mptcp.enabled is 0 in the namespace")
    ip("mptcp", "limits", "set", "subflows", "3", "add_addr_accepted", "3")
    if role == "client":
        for k in range(1, len(LINES)):
            ip("mptcp", "endpoint", "add", SITE.format(k), "dev", f"to-isp{k}", "subflow")
        for k in range(len(LINES)):
            table = str(TABLE_BASE + k)
            ip("rule", "add", "from", SITE.format(k), "table", table, "pref", table)
            ip("route", "add", "default", "via", ROUTER.format(k), "dev", f"to-isp{k}",
               "table", table)
    subprocess.run(["ip", "mptcp", "limits", "show"], timeout=10)
    subprocess.run(["ip", "mptcp", "endpoint", "show"], timeout=10)
    print("ok", flush=True)


def teardown():
    """Removes the site's MPTCP endpoints and per-source routes: the bond's phase runs on
    the lab's own routing, as the `bond` recipe does."""
    ip("mptcp", "endpoint", "flush")
    for k in range(len(LINES)):
        table = str(TABLE_BASE + k)
        ip("rule", "del", "from", SITE.format(k), "table", table, "pref", table)
        ip("route", "flush", "table", table)
    print("ok", flush=True)


def subflows(sock):
    """The MPTCP connection's subflows beyond the first (MPTCP_INFO's mptcpi_subflows), or
    None when the socket fell back to plain TCP."""
    try:
        info = sock.getsockopt(SOL_MPTCP, MPTCP_INFO, 64)
    except OSError:
        return None
    return info[0] if info else None


def congestion(sock):
    name = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return name.split(b"\0", 1)[0].decode()


def subflow_congestion(port):
    """The congestion control of each TCP subflow to `port` (from `ss -ti`): the MPTCP
    socket's TCP_CONGESTION must have reached every subflow."""
    done = subprocess.run(["ss", "-tinH", "state", "established", f"dport = :{port}"],
                          capture_output=True, text=True, timeout=5)
    return [word for word in done.stdout.split() if word in ("cubic", "reno", "bbr")]


def send(host, port, seconds, result):
    """Sends as fast as the MPTCP connection takes for `seconds`, then resets it (what is
    still queued in the modems does not count)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
        sock.settimeout(5.0)
        sock.connect((host, port))
        sock.settimeout(1.0)
        started = time.monotonic()
        block = bytes(65536)
        sent = 0
        seen = []
        subflow_ccs = []
        next_sample = started + 1.0
        while time.monotonic() < started + seconds:
            try:
                sent += sock.send(block)
            except socket.timeout:
                pass
            if time.monotonic() >= next_sample:
                seen.append(subflows(sock))
                if len(seen) == 3:
                    subflow_ccs = subflow_congestion(port)
                next_sample += 1.0
        report = {"sent_bytes": sent, "congestion": congestion(sock), "subflows": seen,
                  "subflow_congestion": subflow_ccs}
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    with open(result, "w") as f:
        json.dump(report, f)
    print(json.dumps(report), flush=True)


def receive(address, port, seconds, result):
    """Accepts one MPTCP connection and counts what arrives in each second of its first
    `seconds` (the format of `pathlab tcp -J`'s `up[0].interval_bytes`)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(1)
    listener.settimeout(10.0)
    # The listener stays open: the subflows' MP_JOIN SYNs come to it.
    conn, peer = listener.accept()
    started = time.monotonic()
    conn.settimeout(0.5)
    intervals = [0] * int(seconds)
    buffer = bytearray(1 << 18)
    seen = []
    next_sample = started + 1.0
    while True:
        now = time.monotonic()
        if now >= started + seconds:
            break
        if now >= next_sample:
            seen.append(subflows(conn))
            next_sample += 1.0
        try:
            n = conn.recv_into(buffer)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if n == 0:
            break
        k = int((time.monotonic() - started) // 1.0)
        if k < len(intervals):
            intervals[k] += n
    conn.close()
    listener.close()
    report = {"peer": peer[0], "interval_ns": 1_000_000_000, "subflows": seen,
              "up": [{"interval_bytes": intervals}]}
    with open(result, "w") as f:
        json.dump(report, f)
    print(json.dumps({"peer": peer[0], "bytes": sum(intervals), "subflows": seen}), flush=True)


# ---------------------------------------------------------------------------------------
# The run: the spec, the lab, the figures.


def line_spec(k):
    rate, delay, limit = LINES[k]
    return f"delay {delay}ms rate {rate}mbit limit {limit}", f"delay {delay}ms {DOWN}"


def timeline(seconds):
    """When each phase's flow starts (s into the run), and the run's length."""
    slot = seconds + PHASE_MARGIN_S
    starts = {}
    at = 5
    for k in range(len(LINES)):
        starts[f"alone-isp{k}"] = at
        at += slot
    starts["mptcp"] = at + 1  # its receiver listens a second before
    at += slot + 2  # and the site's MPTCP routes go after it
    starts["tunnel"] = at + 3  # the bond's client starts three seconds before
    return starts, starts["tunnel"] + slot


def spec(seconds, python, names):
    starts, duration = timeline(seconds)
    out = site_spec("bond-mptcp", duration, [line_spec(k) for k in range(len(LINES))])

    def command(name, node, start, length, argv):
        text = f'[[workload]]\nname = "{name}"\nkind = "command"\nfrom = "{node}"\n'
        text += f'start = "{start}s"\n'
        if length is not None:
            text += f'duration = "{length}s"\n'
        out.append(text + "command = " + json.dumps(argv))

    def rtt(name, address, start, length, interval):
        out.append(f'[[workload]]\nname = "{name}"\nkind = "rtt"\nfrom = "site"\nto = "srv"\n'
                   f'address = "{address}"\nstart = "{start}s"\nduration = "{length}s"\n'
                   f'interval = "{interval}"')

    def tcp(name, address, start):
        command(name, "site", start, seconds + 3,
                ["{pathlab}", "tcp", address, "-t", str(seconds), "-C", "cubic", "-J"])

    lines = ["--line", "to-isp0"]
    for k in range(1, len(LINES)):
        lines += ["--line", f"to-isp{k},via={ROUTER.format(k)}"]
    command("key", "srv", 0, 1, ["{pathlab}", "bond", "key", "{out}/bond.key"])
    command("mptcp-setup-srv", "srv", 0, 3,
            [python, SCRIPT, "setup", "server", "{out}/" + SETUP_FAILED])
    command("mptcp-setup-site", "site", 0, 3,
            [python, SCRIPT, "setup", "client", "{out}/" + SETUP_FAILED])
    command("bond-server", "srv", 1, None,
            ["{pathlab}", "bond", "server", "--listen", f"{SERVER}:7000", "--psk",
             "{out}/bond.key", "--address", "198.19.0.1/24", "--name", names["server"]])
    # The fastest line's base RTT, idle; it also starts the lab's measurement server in srv.
    rtt("base-rtt", SERVER, 1, 3, "50ms")
    for k in range(len(LINES)):
        tcp(f"alone-isp{k}", server(k), starts[f"alone-isp{k}"])
    at = starts["mptcp"]
    command("mptcp-receive", "srv", at - 1, seconds + 4,
            [python, SCRIPT, "receive", SERVER, str(MPTCP_PORT), str(seconds),
             "{out}/mptcp-receive.json"])
    command("mptcp-send", "site", at, seconds + 2,
            [python, SCRIPT, "send", SERVER, str(MPTCP_PORT), str(seconds),
             "{out}/mptcp-send.json"])
    command("mptcp-teardown", "site", at + seconds + 3, 1, [python, SCRIPT, "teardown"])
    at = starts["tunnel"]
    command("client", "site", at - 3, seconds + 6,
            ["{pathlab}", "bond", "client", f"{SERVER}:7000", *lines, "--psk",
             "{out}/bond.key", "--address", "198.19.0.2/24", "--name", names["client"],
             "-J"])
    rtt("tunnel-idle-rtt", "198.19.0.1", at - 1.5, 1.5, "50ms")
    tcp("tunnel", "198.19.0.1", at)
    rtt("tunnel-rtt", "198.19.0.1", at + SKIP_S, seconds - SKIP_S - TAIL_S, "50ms")
    return "\n".join(out) + "\n", starts


def quantile(values, q):
    """Nearest-rank quantile of `values` (as the tests' queue_quantile), None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(max(int(-(-q * len(ordered) // 1)), 1), len(ordered))
    return ordered[rank - 1]


def steady_goodput(path, seconds):
    """Mean goodput (Mbit/s) of the one-second intervals in [SKIP_S, seconds - TAIL_S) of a
    `pathlab tcp -J` output or the MPTCP receiver's result, and every interval's (Mbit/s)."""
    with open(path) as f:
        report = json.load(f)
    every = [b * 8 / 1e6 for b in report["up"][0]["interval_bytes"]]
    steady = every[SKIP_S:seconds - TAIL_S]
    if not steady:
        raise SystemExit(f"{path}: no interval in the steady window")
    return sum(steady) / len(steady), every


def read_lines(run):
    """Per line, its upward packets: (arrived s, queue delay ms or None if dropped, wire
    bytes, dequeued s or None)."""
    found = []
    for k in range(len(LINES)):
        packets = []
        with open(os.path.join(run, f"link-site-isp{k}.jsonl")) as f:
            for text in f:
                if '"packet"' not in text:
                    continue
                value = json.loads(text)
                if value.get("type") != "packet" or value.get("dir") != 0:
                    continue
                arrived = value["arrived"]
                dequeued = value.get("dequeued")
                packets.append((arrived / 1e9,
                                None if dequeued is None else (dequeued - arrived) / 1e6,
                                value["len_bytes"],
                                None if dequeued is None else dequeued / 1e9))
        found.append(packets)
    return found


def line_figures(packets, start, end):
    """Queue delay p50/p95 (ms) of the packets that arrived in [start, end), and what left
    the queue in that time (Mbit/s, frames as the emulator counts them)."""
    delays = [q for at, q, _, _ in packets if start <= at < end and q is not None]
    carried = sum(n for _, _, n, left in packets if left is not None and start <= left < end)
    return {"queue_p50_ms": quantile(delays, 0.5), "queue_p95_ms": quantile(delays, 0.95),
            "carried_mbit": carried * 8 / 1e6 / (end - start), "packets": len(delays)}


def workloads(run):
    with open(os.path.join(run, "result.json")) as f:
        result = json.load(f)["result"]["data"]
    return {w["name"]: w for w in result["workloads"]}, result


def rtts_ms(workload):
    """The RTTs (ms) of an `rtt` workload's replies."""
    outcome = workload["outcome"]
    if outcome["kind"] != "rtt":
        raise SystemExit(f"{workload['name']}: {outcome}")
    return [rtt / 1e6 for _, rtt in outcome["data"]["series"]]


def command_output(run, name):
    try:
        with open(os.path.join(run, f"{name}.out")) as f:
            return f.read().strip()
    except OSError:
        return "(no output)"


def check_commands(run, by_name, names):
    """Aborts when a set-up command failed, or a flow's command did not run to its end."""
    for name in names:
        outcome = by_name[name]["outcome"]
        code = outcome.get("data", {}).get("exit_code") if outcome["kind"] == "command" else -1
        if code != 0:
            raise SystemExit(f"set-up wrong: workload {name} ended with {outcome}; its "
                             f"output:\n{command_output(run, name)}")


def fmt(value, digits=1):
    return "–" if value is None else f"{value:.{digits}f}"


def table(figures):
    """docs/bond-results.md's table: goodput, its share of the lines' sum, each line's queue."""
    alone = figures["alone_mbit"]
    head = "| | goodput Mbit/s | share of the sum |"
    rule = "|---|---|---|"
    for k, (rate, delay, _) in enumerate(LINES):
        head += f" line {k} ({rate} Mbit/s, {delay} ms) queue p50 / p95 ms |"
        rule += "---|"
    rows = [head, rule]
    # Alone, each line's queue is the one its own flow built.
    row = ("| each line alone, plain TCP | " + " + ".join(f"{a:.2f}" for a in alone)
           + f" = {figures['sum_mbit']:.2f} | 100% |")
    for line in figures["alone_lines"]:
        row += f" {fmt(line['queue_p50_ms'])} / {fmt(line['queue_p95_ms'])} |"
    rows.append(row)
    for key, label in (("mptcp", "Linux MPTCP, a subflow per line"),
                       ("bond", "pathlab bond")):
        phase = figures[key]
        row = f"| {label} | {phase['goodput_mbit']:.2f} | {100 * phase['share']:.1f}% |"
        for line in phase["lines"]:
            row += f" {fmt(line['queue_p50_ms'])} / {fmt(line['queue_p95_ms'])} |"
        rows.append(row)
    order = figures["order"]
    base = order["base_rtt_ms"]
    rows.append("")
    rows.append(f"Per-flow order: the host's own RTT probes through the tunnel while its flow "
                f"fills it: p50 {fmt(order['loaded_p50_ms'])} ms, p95 "
                f"{fmt(order['loaded_p95_ms'])} ms ({order['loaded_replies']} of "
                f"{order['loaded_sent']} answered; idle through the tunnel "
                f"{fmt(order['tunnel_idle_p50_ms'])} ms); the fastest line's base RTT "
                f"{fmt(base)} ms, so the issue's bound for p95 is {fmt(base + ORDER_BOUND_MS)} ms.")
    return "\n".join(rows)


def analyse(run, seconds, starts):
    by_name, result = workloads(run)
    check_commands(run, by_name, ["mptcp-setup-srv", "mptcp-setup-site"])
    flows = [f"alone-isp{k}" for k in range(len(LINES))] + ["tunnel"]
    for name in flows + ["mptcp-send"]:
        outcome = by_name[name]["outcome"]
        if outcome["kind"] != "command" or not os.path.exists(os.path.join(run, f"{name}.out")):
            raise SystemExit(f"set-up wrong: {name} did not run: {outcome}")
    for path in ("mptcp-send.json", "mptcp-receive.json"):
        if not os.path.exists(os.path.join(run, path)):
            name = path.split(".")[0]
            raise SystemExit(f"set-up wrong: MPTCP's {name} wrote no result; its output:\n"
                             f"{command_output(run, name)}")
    lines = read_lines(run)

    def window(flow):
        at = starts[flow]
        return at + SKIP_S, at + seconds - TAIL_S

    alone = []
    alone_lines = []
    alone_intervals = []
    for k in range(len(LINES)):
        name = f"alone-isp{k}"
        goodput, every = steady_goodput(os.path.join(run, f"{name}.out"), seconds)
        alone_intervals.append(every)
        alone_lines.append(line_figures(lines[k], *window(name)))
        carried = alone_lines[-1]["carried_mbit"]
        rate = LINES[k][0]
        if not 0.5 * rate < carried <= 1.02 * rate or goodput > rate:
            raise SystemExit(f"set-up wrong: line {k} alone carried {carried:.2f} Mbit/s "
                             f"(goodput {goodput:.2f}) on a {rate} Mbit/s line")
        alone.append(goodput)
    total = sum(alone)
    # A line alone below its theory means the emulators, not the lines, set the sum (a
    # busy machine: a quick run with emulators 480 ms late gave 9.33 Mbit/s on the 12 Mbit/s
    # line, and shares above 100%).
    short = [f"line {k} alone {a:.2f} Mbit/s of {LINES[k][0] * TCP_PAYLOAD_PER_FRAME:.2f}"
             for k, a in enumerate(alone) if a < ALONE_LEAST * LINES[k][0] * TCP_PAYLOAD_PER_FRAME]
    figures = {"alone_mbit": alone, "sum_mbit": total, "alone_lines": alone_lines,
               "alone_intervals_mbit": alone_intervals, "alone_below_theory": short}
    for key, flow, path in (("mptcp", "mptcp", "mptcp-receive.json"),
                            ("bond", "tunnel", "tunnel.out")):
        goodput, every = steady_goodput(os.path.join(run, path), seconds)
        per_line = [line_figures(lines[k], *window(flow)) for k in range(len(LINES))]
        for k, line in enumerate(per_line):
            if line["carried_mbit"] < LEAST_SHARE * alone[k]:
                raise SystemExit(
                    f"set-up wrong: line {k} carried {line['carried_mbit']:.2f} Mbit/s during "
                    f"the {key} phase, under a tenth of its {alone[k]:.2f} alone")
        figures[key] = {"goodput_mbit": goodput, "share": goodput / total, "lines": per_line,
                        "intervals_mbit": every}
    with open(os.path.join(run, "mptcp-send.json")) as f:
        sender = json.load(f)
    with open(os.path.join(run, "mptcp-receive.json")) as f:
        receiver = json.load(f)
    if sender["congestion"] != "cubic" or set(sender["subflow_congestion"]) != {"cubic"}:
        raise SystemExit(f"set-up wrong: the MPTCP sender ran {sender['congestion']}, its "
                         f"subflows {sender['subflow_congestion']}")
    if not any(sender["subflows"]):
        raise SystemExit(f"set-up wrong: the MPTCP connection never had a second subflow "
                         f"(MPTCP_INFO at the sender: {sender['subflows']})")
    figures["mptcp"]["subflows_sender"] = sender["subflows"]
    figures["mptcp"]["subflows_receiver"] = receiver["subflows"]
    figures["mptcp"]["subflow_congestion"] = sender["subflow_congestion"]
    base = quantile(rtts_ms(by_name["base-rtt"]), 0.5)
    loaded = rtts_ms(by_name["tunnel-rtt"])
    idle = rtts_ms(by_name["tunnel-idle-rtt"])
    figures["order"] = {
        "base_rtt_ms": base,
        "tunnel_idle_p50_ms": quantile(idle, 0.5),
        "loaded_p50_ms": quantile(loaded, 0.5),
        "loaded_p95_ms": quantile(loaded, 0.95),
        "loaded_replies": len(loaded),
        "loaded_sent": by_name["tunnel-rtt"]["outcome"]["data"]["sent"],
    }
    late = []
    for link in result.get("links", []):
        for direction in link.get("lateness", []):
            if direction.get("late_seconds"):
                late.append(f"{link['name']} ({direction['from']} to {direction['to']}): "
                            f"{direction['late_seconds']} of {direction['seconds']} s late")
    figures["late_emulators"] = late
    return figures


def leftovers(marker):
    """Processes whose command line names this run's output directory: the lab's own and
    its programs (none should outlive it)."""
    return [pid for pid, argv in command_lines().items()
            if pid != os.getpid() and any(marker.encode() in a for a in argv)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30, help="each flow's length (s)")
    parser.add_argument("--quick", action="store_true", help="10 s per flow")
    parser.add_argument("--pathlab", default=PATHLAB,
                        help="the pathlab binary (default: this worktree's release build)")
    parser.add_argument("--out", help="output directory (default: a new one under /tmp)")
    parser.add_argument("--json", help="where to write the result (default OUT/bond_mptcp.json)")
    parser.add_argument("--keep", action="store_true", help="keep the lines' recordings")
    args = parser.parse_args()
    seconds = 10 if args.quick else args.seconds
    if not 8 <= seconds <= 60:
        parser.error("--seconds: from 8 to 60")
    pathlab = os.path.abspath(args.pathlab)
    if not os.access(pathlab, os.X_OK):
        parser.error(f"--pathlab: {pathlab} is not an executable "
                     "(cargo build --release -p pathlab)")
    out = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="bond-mptcp-")
    os.makedirs(out, exist_ok=True)
    names = {"server": f"mptcp-srv-{os.getpid()}", "client": f"mptcp-site-{os.getpid()}"}
    text, starts = spec(seconds, sys.executable, names)
    spec_path = os.path.join(out, "bond-mptcp.toml")
    with open(spec_path, "w") as f:
        f.write(text)
    run = os.path.join(out, "run")
    length = timeline(seconds)[1]
    load = os.getloadavg()
    print(f"{seconds} s per flow, about {length + 10} s in all; pathlab {pathlab}; "
          f"results in {out}", flush=True)
    with open(os.path.join(out, "lab.log"), "w") as log:
        lab = subprocess.Popen([pathlab, "lab", spec_path, "--out", run], stdout=log,
                               stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + length + 120
            failed = os.path.join(run, SETUP_FAILED)
            while lab.poll() is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"pathlab lab still runs {length + 120} s after its start")
                if os.path.exists(failed):
                    time.sleep(0.2)
                    with open(failed) as f:
                        raise SystemExit(f"set-up wrong: MPTCP's set-up failed, {f.read().strip()}")
                time.sleep(0.2)
        finally:
            if lab.poll() is None:
                # Ctrl-C reached the lab too; on our own errors, stop it the same way (it
                # keeps what it measured and removes its namespaces), then for good.
                lab.send_signal(signal.SIGINT)
                try:
                    lab.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    lab.kill()
                    lab.wait()
            left = leftovers(out)
            if left:
                print(f"left running after the lab: {left}; ending them", file=sys.stderr)
                for pid in left:
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
    if lab.returncode != 0 and os.path.exists(os.path.join(run, "result.json")):
        with open(os.path.join(run, "result.json")) as f:
            if json.load(f)["result"]["data"].get("interrupted"):
                raise SystemExit(f"interrupted; what was measured is in {run}")
    if lab.returncode != 0:
        raise SystemExit(f"pathlab lab failed ({lab.returncode}); see {out}/lab.log")
    figures = analyse(run, seconds, starts)
    if not args.keep:
        for name in os.listdir(run):
            if name.startswith("link-") and name.endswith(".jsonl"):
                os.remove(os.path.join(run, name))
    figures.update({
        "magic": "pathlab-bench-bond-mptcp", "version": 1, "pathlab": pathlab,
        "seconds": seconds, "steady_window_s": [SKIP_S, seconds - TAIL_S],
        "lines": [{"up_mbit": r, "one_way_ms": d, "buffer_packets": b} for r, d, b in LINES],
        "queue_source": "emulator recordings (dequeued - arrived of each upward packet)",
        "kernel": os.uname().release,
        "load_average": [load[0], os.getloadavg()[0]],
    })
    path = args.json or os.path.join(out, "bond_mptcp.json")
    with open(path, "w") as f:
        json.dump(figures, f, indent=1)
    print(table(figures))
    if figures["late_emulators"]:
        print("warning: emulators sent late (the machine was busy), figures may reflect the "
              "emulator, not the line: " + "; ".join(figures["late_emulators"]))
    print(f"load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"result: {path}")
    if figures["alone_below_theory"]:
        print("not a valid run, the shares are against a sum the emulators lowered: "
              + "; ".join(figures["alone_below_theory"]) + " (theory: rate x 1448 / 1514)")
        return 1
    return 0


def inner(argv):
    """The roles the lab's spec starts inside its namespaces."""
    role = argv[0]
    if role == "setup":
        try:
            setup(argv[1])
        except SystemExit as failure:
            # The run watches for this file, to stop at once rather than minutes later.
            with open(argv[2], "a") as f:
                f.write(f"{argv[1]}: {failure}\n")
            raise
    elif role == "teardown":
        teardown()
    elif role == "send":
        send(argv[1], int(argv[2]), float(argv[3]), argv[4])
    elif role == "receive":
        receive(argv[1], int(argv[2]), float(argv[3]), argv[4])
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("setup", "teardown", "send", "receive"):
        sys.exit(inner(sys.argv[1:]))
    sys.exit(main())
