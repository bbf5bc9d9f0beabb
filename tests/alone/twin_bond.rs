//! `pathlab twin` on the bond over three lines (issue 41, part 4): the path the twin
//! measures is the tunnel, from the site's inner address to the server's, with what
//! pathlab's single-link emulator does not make: datagrams spread over three unequal
//! lines and put back in order per flow, each line paced by its controller, the tunnel's
//! own fair queue with CoDel in front of them. The lines are the `bond` recipe's.

use std::net::Ipv4Addr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use pathlab_emulator::emulator::{EmulatorHandle, EmulatorStats};
use pathlab_lab::topology::Topology;
use pathlab_lab::Experiment;
use pathlab_twin::check::LOADED_RTT_WITHIN;

use crate::twin::LATENESS_SHARE;
use crate::util;
use crate::util::bond_site::{
    client_lines, server_args, start_client, start_line_emulators, start_server, topology_of,
    Daemon, LineShape, StatsSockets, SERVER_INNER, SITE, SRV,
};
use crate::util::emulated::{privileged, PATHLAB};
use crate::util::late::{ms, Lateness, Quantile};
use crate::util::TempDir;

/// The `bond` recipe's lines up; down, twice their rate up ([`DOWN`]).
const LINES: [LineShape; 3] = [
    LineShape {
        rate: "12mbit",
        limit_packets: 1000,
        delay_ms: 10,
    },
    LineShape {
        rate: "6mbit",
        limit_packets: 500,
        delay_ms: 20,
    },
    LineShape {
        rate: "3mbit",
        limit_packets: 250,
        delay_ms: 40,
    },
];
/// The lines' rates down, with the same buffers in time as up. Not the `bond` recipe's
/// 50 Mbit/s each: the tunnel's ends forward 80-116 Mbit/s on this machine, changing from
/// run to run, so down the path would be their CPU, not the lines, and a twin measured at
/// 97 Mbit/s met a path that carried bulk TCP at 115.6 ten seconds later (-20%).
const DOWN: [&str; 3] = ["24mbit", "12mbit", "6mbit"];
/// Where the measurement server listens: the tunnel's far end.
const SERVER_PORT: u16 = 4920;

/// A `pathlab server` on the server's inner address; ended when dropped.
struct MeasureServer(Child);

impl MeasureServer {
    fn start(srv: &pathlab_os::netns::Netns, site: &pathlab_os::netns::Netns) -> MeasureServer {
        let listen = format!("{SERVER_INNER}:{SERVER_PORT}");
        let child = srv
            .command(PATHLAB)
            .args(["server", "--listen", &listen])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pathlab server starts");
        let server = MeasureServer(child);
        let address = (SERVER_INNER, SERVER_PORT).into();
        let waiting = Instant::now();
        while !site
            .run(|| {
                std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
            })
            .expect("enter the site")
        {
            assert!(
                waiting.elapsed() < Duration::from_secs(10),
                "pathlab server did not come up"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        server
    }
}

impl Drop for MeasureServer {
    fn drop(&mut self) {
        let _ = pathlab_os::kill(self.0.id(), util::emulated::libc_sigterm());
        let _ = self.0.wait();
    }
}

/// Puts every thread of process `pid` (a tunnel end) in `SCHED_FIFO` at [`END_PRIORITY`].
///
/// The tunnel's ends are the path's routers, each with a CPU of its own where a bond
/// runs; on this machine, shared with builds and other tests, at normal priority they were
/// the path's bottleneck instead of its lines: with tasks waiting for a CPU 89-95% of the
/// time (`/proc/pressure/cpu`), bulk TCP up went at 0.14 Mbit/s of the lines' 18 and the
/// idle round trip was 50 ms of 20, so the twin copied the machine's load, not the path.
/// Real-time as the emulators' forwarding threads are, below them.
fn realtime(pid: u32) {
    let status = std::process::Command::new("chrt")
        .args([
            "--fifo",
            "--all-tasks",
            "--pid",
            &END_PRIORITY.to_string(),
            &pid.to_string(),
        ])
        .status()
        .expect("chrt runs");
    assert!(status.success(), "chrt of {pid}: {status}");
}

/// The tunnel's ends' `SCHED_FIFO` priority: below the emulators' forwarding threads
/// (`pathlab_os::scheduling::REALTIME_PRIORITY`, 50), above the probe senders' bursts (40).
const END_PRIORITY: u32 = 45;

/// Every line emulator's stats now.
fn line_stats(emulators: &[EmulatorHandle]) -> Vec<EmulatorStats> {
    emulators
        .iter()
        .map(|e| e.stats().expect("the emulator's stats"))
        .collect()
}

/// The tunnel up with a `pathlab server` at its far end; `twin` through it, then `twin
/// check`, each row judged as `tests/twin.rs` judges the tbf path's: every figure within
/// issue 41's bound, the round trips under load within 10% plus what the emulators'
/// lateness during the check adds (the line emulators' between two readings, the twin
/// lab's from its result). Shown to fail on a wrong twin: the twin file's rate up edited
/// 20% higher missed goodput up and the round trips.
///
/// The check's bulk transfers take its default 10 s (iperf3's too): through the tunnel
/// bulk TCP ramps for its first 1-2 s (the lines' controllers and the tunnel's CoDel),
/// which the twin copies, and a 3 s check compared mostly that
/// (goodput up -7% to -21% of the twin's).
///
/// It held in 1 of 12 runs with a 10 s check at first; what the others missed is fixed
/// (docs/twin.md): goodput down low (bulk TCP through the tunnel, its headers compressed,
/// carried more than the rate the probes found: the twin raises its rate to what bulk TCP
/// met, `pathlab_twin::calibrate`), a rate that 'moved' from one 100 ms window to the next
/// and was replayed as a trace (now judged in 500 ms), loaded RTT p95 high where late
/// low-load probes were replayed as 5% of the packets (the variation's last point keeps
/// its segment's mean, the variation is in 1% steps, the drain's cut goes to the first
/// probe near the settled median), goodput 3.6-4.7% high where the path's start after
/// pings ramps for 1-2 s (the twin copies it where its own flow after pings shows it:
/// `pathlab_twin::restart`). Of 8 runs after that, 6 held every row; one missed loaded RTT
/// p95 (fixed: the drain's cut and the 1% steps), one goodput down by +5.3% (its flow after
/// pings lost little, the check's transfer 5%: the path's start varies from run to run).
/// Of the runs on 2026-12-07 after those, the misses were a rate judged moving on one
/// threshold (10.5% in 500 ms: now a suspicion a longer phase clears), a restart ramp's
/// interval to infinity (the twin file did not read back), and a sparse flow judged over
/// the tunnel's ramp (no ring: loaded RTT down -18%); each fixed. With them it held alone
/// four times of four (7fd1c18 on), but failed once beside the suite's other tests (which
/// the heavy lock let run beside it): the tunnel's ends, short of CPU, carried the check's
/// bulk TCP down at 24.4 Mbit/s where the twin had measured 38.6 (its loaded RTT 20.6 ms,
/// the lines no longer full), and passed alone at once. It takes the machine to itself
/// (the exclusive lock, among the `alone` tests). Its goodput stayed 2-6% above the path's
/// (one run of three failing at +5.7% up) until the bond's controller stopped draining its
/// lines at a restart (`pathlab_bond::control`: after the ~40 s the lines up sat idle
/// before the check, the drain was due and cut them to 3/4 of the little a flow's first
/// round trips delivered): of 7 runs after, 4 alone and 3 under `scripts/test --busy`,
/// each held every row (goodput -1.8% to +2.6% both ways, loaded RTT within 1.1%).
#[test]
fn a_twin_of_the_bond_over_three_lines_holds_on_twin_check() {
    let Some(_lock) = privileged("a_twin_of_the_bond_over_three_lines") else {
        return;
    };
    let started = Instant::now();
    let dir = TempDir::new("twin-bond");
    let key = dir.path("bond.key");
    let output = util::emulated::pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let key = key.to_str().unwrap();
    let name = format!("tb{}", std::process::id());
    let experiment = Experiment::parse(&topology_of(&name, &line_specs())).expect("it parses");
    let topology = Topology::build(&experiment).expect("the namespaces build");
    let emulators = start_line_emulators(
        &topology,
        &experiment,
        LINES.len(),
        1,
        "tests/alone/twin_bond.rs",
    );
    let (site, srv) = (&topology.nodes[SITE], &topology.nodes[SRV]);
    let _stats_sockets = StatsSockets::of(&[site, srv]);
    let server = start_server(srv, &server_args(key, &[]), dir.path("server.stderr"));
    let lines = client_lines(LINES.len());
    let client: Daemon = start_client(site, key, lines, &[], dir.path("client.stderr"));
    for pid in [server.pid(), client.pid()] {
        realtime(pid);
    }
    let _measure = MeasureServer::start(srv, site);
    let host = Ipv4Addr::to_string(&SERVER_INNER);

    let out = dir.path("bond.toml");
    crate::twin::measure_twin(site, &host, "20s", "160M", &out);
    eprintln!("twin took {:.1} s", started.elapsed().as_secs_f64());

    let before = line_stats(&emulators);
    let check_out = dir.path("check");
    let check = crate::twin::run_twin_check(site, &out, &host, "10s", &check_out);
    let after = line_stats(&emulators);
    let lines: Vec<Lateness> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| Lateness::between(b, a))
        .collect();
    let twin_lab = Lateness::of_lab_link(&check_out.join("twin").join("result.json"), "near-far");
    let mut missed = Vec::new();
    for row in check["rows"].as_array().expect("rows") {
        let name = row["name"].as_str().unwrap();
        let (on_path, on_twin) = (row["real"].as_f64().unwrap(), row["twin"].as_f64().unwrap());
        eprintln!(
            "{name:28} path {on_path:>10.3} twin {on_twin:>10.3} error {:+.3} within {}",
            row["error"].as_f64().unwrap_or(f64::NAN),
            row["within"]
        );
        if !name.starts_with("RTT") {
            if row["within"] != true {
                missed.push(format!("{name}: {row}"));
            }
            continue;
        }
        let quantile = if name.contains("p50") {
            Quantile::P50
        } else {
            Quantile::P99
        };
        // What one emulator's lateness may add to the round trip and the test still judge
        // it, as on the tbf path (about 1.3 ms of the tunnel's 25.7 under load; seen: the
        // lines' p99 200 us a way, the twin lab's 300-320 us both ways, 2026-12-07).
        let budget = Duration::from_secs_f64(LATENESS_SHARE * on_path / 1e3);
        let slack_ms = round_trip_slack_ms(&lines, quantile, budget)
            + ms(twin_lab.slack(quantile, &[0, 1], budget));
        let bound = LOADED_RTT_WITHIN * on_path + slack_ms;
        if (on_twin - on_path).abs() > bound {
            missed.push(format!(
                "{name}: the twin's {on_twin:.2} ms against the path's {on_path:.2} (bound {bound:.2} \
                 ms: {:.0}% and {slack_ms:.2} of the emulators' lateness)",
                LOADED_RTT_WITHIN * 100.0
            ));
        }
    }
    eprintln!("test took {:.1} s", started.elapsed().as_secs_f64());
    assert!(missed.is_empty(), "the twin misses:\n{}", missed.join("\n"));
}

/// Each line's specs, (up, down): [`LINES`] up, [`DOWN`] down with buffers as long.
fn line_specs() -> Vec<(String, String)> {
    LINES
        .iter()
        .zip(DOWN)
        .map(|(line, down)| {
            let (up, _) = line.specs(line.delay_ms);
            let limit = 2 * line.limit_packets;
            let down = format!("delay {}ms rate {down} limit {limit}", line.delay_ms);
            (up, down)
        })
        .collect()
}

/// What the line emulators' lateness adds to a round trip through the tunnel at
/// `quantile`, ms: a round trip crosses one line each way, which one the scheduler's to
/// choose, so each way counts its latest line (each judged against `budget`).
fn round_trip_slack_ms(lines: &[Lateness], quantile: Quantile, budget: Duration) -> f64 {
    [0, 1]
        .iter()
        .map(|&way| {
            lines
                .iter()
                .map(|line| ms(line.slack(quantile, &[way], budget)))
                .fold(0.0, f64::max)
        })
        .sum()
}
