//! Keys that roll over without a hiccup (issue 40, item 1), across real sockets: a 60 s
//! bulk TCP transfer through the `bond` recipe's three lines with `--rekey-after 10s`
//! at both ends, and at the same time the same transfer through a twin of the recipe whose
//! ends keep their keys (the default 120 s is past the run), so both meet the same busy
//! machine. The rekeying tunnel must rekey at least 5 times, deliver every byte (SHA-256),
//! refuse no datagram for want of a key (no authentication failure at either end) and keep
//! its session, at a goodput within 2% of its twin's (both lines capped: [`CAPS`]).

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use pathlab_bond::stats::BondStats;
use pathlab_emulator::emulator::EmulatorHandle;
use pathlab_lab::topology::Topology;
use pathlab_lab::Experiment;

use crate::util;
use crate::util::bond_site::{
    bond_stats, client_lines_capped, per_second, receive, send, server_args, start_client,
    start_line_emulators, start_server, topology_spec, transfer_failure, AbortOnDrop, Amount,
    Daemon, LineShape, Received, StatsSockets, PORT, SITE, SRV,
};
use crate::util::emulated::privileged_heavy;
use crate::util::TempDir;

/// The soak's lines (benches/bond_soak.py): 14 Mbit/s up together, each buffer about
/// 0.6 s at its rate, so two tunnels at once stay light on two cores.
const LINES: [LineShape; 3] = [
    LineShape {
        rate: "8mbit",
        limit_packets: 400,
        delay_ms: 10,
    },
    LineShape {
        rate: "4mbit",
        limit_packets: 200,
        delay_ms: 20,
    },
    LineShape {
        rate: "2mbit",
        limit_packets: 100,
        delay_ms: 40,
    },
];
/// Each line's cap at the client (`rate=`), three quarters of its rate: the tunnel then
/// sends at its caps, the same in both tunnels, and what a rekey costs is what their
/// goodputs differ by. Uncapped, the controllers' own spread between two tunnels on one
/// machine was larger than the 2% judged: each sat at 11.03 Mbit/s most seconds and one
/// or the other rose to 12.5 for a while, +3.95% (CI, stop 53), +2.36% and -3.91% (two
/// full runs on 2026-12-07), whichever tunnel rekeyed.
const CAPS: [&str; 3] = ["6mbit", "3mbit", "1500kbit"];
/// The transfer's length.
const TRANSFER: Duration = Duration::from_secs(60);
/// Goodput is compared from this long after the transfer's start (TCP's slow start and
/// the lines' controllers finding their rates are the same in both, but noisy) to its end.
const SETTLE: Duration = Duration::from_secs(5);
/// The rekeying tunnel's `--rekey-after`.
const REKEY_AFTER_S: u64 = 10;
/// Rekeys the issue asks for in the 60 s (6 are due; the first 10 s after the session
/// opened, before the transfer starts).
const MIN_REKEYS: u64 = 5;
/// How far the rekeying tunnel's goodput may fall below (or rise above) its twin's.
const GOODPUT_TOLERANCE: f64 = 0.02;
/// The goodputs are compared only when tasks waited for a CPU less than this share of the
/// transfer's time (`/proc/pressure/cpu`), as bond_classes judges its delays.
const MAX_STALLED: f64 = 0.25;

/// One of the two tunnels: its namespaces, lines, ends and receiver.
struct Site {
    topology: Topology,
    _emulators: Vec<EmulatorHandle>,
    _stats_sockets: StatsSockets,
    listener: TcpListener,
    server: Daemon,
    client: Daemon,
}

impl Site {
    fn start(name: &str, seed: u64, key: &str, dir: &TempDir, extra: &[&str]) -> Site {
        let experiment = Experiment::parse(&topology_spec(name, &LINES)).expect("it parses");
        let topology = Topology::build(&experiment).expect("the namespaces build");
        let emulators = start_line_emulators(
            &topology,
            &experiment,
            LINES.len(),
            seed,
            "tests/bond_rekey.rs",
        );
        let (site, srv) = (&topology.nodes[SITE], &topology.nodes[SRV]);
        let stats_sockets = StatsSockets::of(&[site, srv]);
        let listener = srv
            .run(|| TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)))
            .expect("enter srv")
            .expect("the receiver listens");
        let server = start_server(
            srv,
            &server_args(key, extra),
            dir.path(&format!("{name}-server.stderr")),
        );
        let client = start_client(
            site,
            key,
            client_lines_capped(&CAPS),
            extra,
            dir.path(&format!("{name}-client.stderr")),
        );
        Site {
            topology,
            _emulators: emulators,
            _stats_sockets: stats_sockets,
            listener,
            server,
            client,
        }
    }

    /// Both ends' stats: (client, server).
    fn stats(&self) -> (BondStats, BondStats) {
        let read = |node: usize| bond_stats(&self.topology.nodes[node]).expect("stats");
        (read(SITE), read(SRV))
    }

    /// The transfer of `seed`'s stream for [`TRANSFER`]; panics, with both ends' stderr,
    /// unless it arrived intact.
    fn transfer(&self, seed: u64, started: Instant, abort: &AtomicBool) -> Received {
        let progress = AtomicU64::new(0);
        let end = Instant::now() + TRANSFER;
        let (sent, received) = std::thread::scope(|scope| {
            let receiver = scope.spawn(|| receive(&self.listener, started, &progress, abort));
            let site = &self.topology.nodes[SITE];
            let sent = send(site, seed, Amount::Until(end), abort);
            (sent, receiver.join().expect("the receiver does not panic"))
        });
        if let Some(failure) = transfer_failure(&sent, &received) {
            panic!(
                "the transfer failed: {failure}\nclient: {}\nserver: {}",
                self.client.stderr(),
                self.server.stderr()
            );
        }
        received.unwrap()
    }
}

/// The session's counters of a stats snapshot (a client has one session; the server must
/// have just the one).
fn counters(stats: &BondStats) -> pathlab_bond::endpoint::BondCounters {
    assert_eq!(stats.sessions.len(), 1, "one session: {stats:?}");
    stats.sessions[0].counters
}

#[test]
fn a_minute_of_bulk_with_rekeys_every_10s_arrives_intact_as_fast_as_without() {
    let Some(_lock) = privileged_heavy("a_minute_of_bulk_with_rekeys") else {
        return;
    };
    let dir = TempDir::new("bond-rekey");
    let key = dir.path("bond.key");
    let output = util::emulated::pathlab(&["bond", "key", key.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let key = key.to_str().unwrap();
    let rekey_after = format!("{REKEY_AFTER_S}s");
    let rekeying = Site::start("rekey", 1, key, &dir, &["--rekey-after", &rekey_after]);
    let steady = Site::start("steady", 1, key, &dir, &[]);
    let session_of = |site: &Site| counters(&site.stats().0);
    let sessions_before = [session_of(&rekeying), session_of(&steady)];

    let abort = AtomicBool::new(false);
    let stall_before = util::late::cpu_stall_us();
    let started = Instant::now();
    let (with, without) = std::thread::scope(|scope| {
        let stop = AbortOnDrop(&abort);
        let with = scope.spawn(|| rekeying.transfer(7, started, &abort));
        let without = steady.transfer(8, started, &abort);
        let with = with.join().expect("the transfer does not panic");
        drop(stop);
        (with, without)
    });
    // Some task of this machine waited for a CPU this share of the transfer's time: the
    // tunnels' processes then run late, unevenly between the two (other tests and builds
    // beside this one gave the steady tunnel 11.354 Mbit/s against the rekeying one's
    // 11.802), and their goodputs are not compared; the rest is judged anyway.
    let stalled = util::late::cpu_stall_us()
        .zip(stall_before)
        .map_or(0.0, |(after, before)| {
            after.saturating_sub(before) as f64 / 1e6 / started.elapsed().as_secs_f64()
        });
    let from = SETTLE;
    let to = TRANSFER.saturating_sub(Duration::from_secs(1));
    let (goodput_with, goodput_without) = (with.mbps(from, to), without.mbps(from, to));
    eprintln!(
        "goodput {from:?}-{to:?}: {goodput_with:.3} Mbit/s rekeying, {goodput_without:.3} \
         without ({:+.2}%); per second, rekeying: {:.2?}; without: {:.2?}",
        (goodput_with / goodput_without - 1.0) * 100.0,
        per_second(&with.reads, Duration::ZERO),
        per_second(&without.reads, Duration::ZERO),
    );

    check_keys_and_sessions(&rekeying, &steady, &sessions_before);
    let ratio = goodput_with / goodput_without;
    if stalled >= MAX_STALLED {
        eprintln!(
            "some task waited for a CPU {:.0}% of the transfer's time: goodputs not compared",
            stalled * 100.0
        );
        return;
    }
    assert!(
        (ratio - 1.0).abs() <= GOODPUT_TOLERANCE,
        "rekeying goodput {goodput_with:.3} Mbit/s is {:+.2}% of the steady tunnel's \
         {goodput_without:.3} (bound ±{:.0}%; CPU stalled {:.0}% of the time)",
        (ratio - 1.0) * 100.0,
        GOODPUT_TOLERANCE * 100.0,
        stalled * 100.0
    );
}

/// Each tunnel's ends: no datagram refused for want of a key, the session kept (no new
/// handshake since `before`), the rekeying one's rekeys at least [`MIN_REKEYS`] and seen
/// at both ends, the steady one's none.
fn check_keys_and_sessions(
    rekeying: &Site,
    steady: &Site,
    before: &[pathlab_bond::endpoint::BondCounters; 2],
) {
    let session_of = |site: &Site| counters(&site.stats().0);
    let sessions_before = before;
    for (site, name) in [(rekeying, "rekeying"), (steady, "steady")] {
        let (client, server) = site.stats();
        let (client, server) = (counters(&client), counters(&server));
        eprintln!(
            "{name}: client rekeys {} ({} handshakes), auth failures {}, replays {}, \
             reconnects {}; server rekeys {}, auth failures {}, replays {}",
            client.rekeys,
            client.rekey_handshakes,
            client.auth_failures,
            client.replays,
            client.reconnects,
            server.rekeys,
            server.auth_failures,
            server.replays
        );
        assert_eq!(
            (client.auth_failures, server.auth_failures),
            (0, 0),
            "{name}: datagrams refused for want of a key"
        );
        assert_eq!(client.reconnects, 0, "{name}: the session was lost");
        if name == "rekeying" {
            assert!(
                client.rekeys >= MIN_REKEYS,
                "{name}: {} rekeys",
                client.rekeys
            );
            assert!(
                server.rekeys + 1 >= client.rekeys,
                "{name}: the server saw {} of the client's {} rekeys",
                server.rekeys,
                client.rekeys
            );
        } else {
            assert_eq!((client.rekeys, server.rekeys), (0, 0), "{name} rekeyed");
        }
    }
    for (before, (site, name)) in sessions_before
        .iter()
        .zip([(rekeying, "rekeying"), (steady, "steady")])
    {
        assert_eq!(
            before.handshakes,
            session_of(site).handshakes,
            "{name}: the client handshook again (a new session)"
        );
    }
}
