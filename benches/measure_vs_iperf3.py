#!/usr/bin/env python3
"""pathlab's measurement clients against iperf3, on loopback, in one run.

    cargo build --release && python3 benches/measure_vs_iperf3.py

Installs iperf3 with apt if it is missing (for this benchmark only: pathlab never needs
it). Set PATHLAB_BENCH_SECS for the length of each run (default 5) and
PATHLAB_BENCH_ROUNDS for the number of alternating rounds (default 3).

TCP: one stream, `pathlab tcp -t S` against `iperf3 -c -t S`, each against its own
server started for the round. Throughput is what the receiver counted; CPU is measured
the same way for both tools, from the kernel's accounting of each process (getrusage of
the reaped child: user + system seconds, client and server). The machine's speed drifts
between minutes, so the tools alternate and every round reports its own ratios.

UDP: the probes per second `pathlab owd` sends and receives (with kernel receive
timestamps) when asked for more than the host can do, against iperf3's UDP mode with the
same payload size and no rate limit (`-u -b 0`).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHLAB = os.path.join(ROOT, "target", "release", "pathlab")
SECS = int(os.environ.get("PATHLAB_BENCH_SECS", "5"))
ROUNDS = int(os.environ.get("PATHLAB_BENCH_ROUNDS", "3"))
IPERF_PORT = 5301
PATHLAB_PORT = 5302
UDP_SIZE = 64


def need_iperf3():
    if shutil.which("iperf3"):
        return
    print("installing iperf3 for this benchmark (apt)...", file=sys.stderr)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "iperf3"],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )


def spawn(argv, stdout=subprocess.DEVNULL):
    return subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL)


def reap(child):
    """Waits for child; returns its own CPU seconds (user + system), from wait4."""
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def run_child(argv):
    """Runs argv to the end; returns (stdout, its CPU seconds)."""
    child = spawn(argv, stdout=subprocess.PIPE)
    out = child.stdout.read()
    cpu = reap(child)
    if child.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed with exit code {child.returncode}")
    return out, cpu


def wait_for_port(port):
    """Waits until something listens on port, without connecting (iperf3 -1 would take a
    probe connection for its one test)."""
    for _ in range(250):
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return
        time.sleep(0.02)
    sys.exit(f"nothing listens on {port}")


def iperf3_tcp():
    server = spawn(["iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
    wait_for_port(IPERF_PORT)
    out, client_cpu = run_child(
        ["iperf3", "-c", "127.0.0.1", "-p", str(IPERF_PORT), "-t", str(SECS), "-J"]
    )
    server_cpu = reap(server)
    end = json.loads(out)["end"]
    return end["sum_received"]["bits_per_second"], client_cpu, server_cpu


def pathlab_server():
    server = spawn(
        [PATHLAB, "server", "--listen", f"127.0.0.1:{PATHLAB_PORT}", "--max-rate", "100gbit"]
    )
    wait_for_port(PATHLAB_PORT)
    return server


def stop(server):
    server.send_signal(signal.SIGTERM)
    return reap(server)


def pathlab_tcp():
    server = pathlab_server()
    out, client_cpu = run_child(
        [PATHLAB, "tcp", f"127.0.0.1:{PATHLAB_PORT}", "-t", str(SECS), "-J"]
    )
    server_cpu = stop(server)
    report = json.loads(out)
    return report["up_bps"], client_cpu, server_cpu


def iperf3_udp():
    server = spawn(["iperf3", "-s", "-1", "-p", str(IPERF_PORT)])
    wait_for_port(IPERF_PORT)
    out, _ = run_child(
        ["iperf3", "-c", "127.0.0.1", "-p", str(IPERF_PORT), "-u", "-b", "0",
         "-l", str(UDP_SIZE), "-t", str(SECS), "-J"]
    )
    reap(server)
    total = json.loads(out)["end"]["sum"]
    received = total["packets"] - total["lost_packets"]
    return total["packets"] / total["seconds"], received / total["seconds"]


def pathlab_owd():
    server = pathlab_server()
    out, _ = run_child(
        [PATHLAB, "owd", f"127.0.0.1:{PATHLAB_PORT}", "--rate", "20gbit",
         "--size", str(UDP_SIZE), "-t", f"{SECS}s", "-J"]
    )
    stop(server)
    result = json.loads(out)[0]
    sequence = result["sequence"]
    received_share = sequence["received"] / max(sequence["sent"], 1)
    return result["achieved_pps"], result["achieved_pps"] * received_share


def main():
    if not os.path.exists(PATHLAB):
        sys.exit("build first: cargo build --release")
    need_iperf3()
    print(f"loopback, {SECS} s per run, {ROUNDS} rounds, {os.cpu_count()} CPUs")
    print()
    print("TCP, one stream (CPU: user + system seconds of client + server)")
    print("round  iperf3 Gbit/s  CPU s   pathlab Gbit/s  CPU s   throughput ratio  CPU/bit ratio")
    for round_ in range(1, ROUNDS + 1):
        i_bps, i_client, i_server = iperf3_tcp()
        p_bps, p_client, p_server = pathlab_tcp()
        i_cpu, p_cpu = i_client + i_server, p_client + p_server
        print(
            f"{round_:>5}  {i_bps / 1e9:>13.2f}  {i_cpu:>5.2f}   {p_bps / 1e9:>14.2f}  {p_cpu:>5.2f}"
            f"   {p_bps / i_bps:>16.3f}  {(p_cpu / p_bps) / (i_cpu / i_bps):>13.3f}"
        )
    print()
    print(f"UDP, {UDP_SIZE}-byte payloads, as fast as the host goes")
    print("round  iperf3 sent/s  received/s   pathlab owd sent/s  received/s  received ratio")
    for round_ in range(1, ROUNDS + 1):
        i_sent, i_received = iperf3_udp()
        p_sent, p_received = pathlab_owd()
        print(
            f"{round_:>5}  {i_sent:>13.0f}  {i_received:>10.0f}   {p_sent:>18.0f}  {p_received:>10.0f}"
            f"  {p_received / i_received:>14.3f}"
        )


if __name__ == "__main__":
    main()
