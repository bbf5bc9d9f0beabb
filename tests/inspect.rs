//! `pathlab inspect` on transfers through the emulator, each limited by one thing on
//! purpose: the receiver's window, the send buffer, the application, the path's losses.
//! The inspector runs in h1 beside the sender, as a user would run it next to a program
//! it cannot change; the ground truth is what the receiver counted and what the emulator
//! dropped.

use crate::util;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::util::emulated::{privileged_paired, Lab, PATHLAB};
use crate::util::late::{Lateness, Quantile};
use pathlab_diagnose::diagnosis::{ConnectionReport, InspectReport, Limit};

/// How the sender writes.
#[derive(Clone, Copy)]
pub(crate) enum Writes {
    /// As fast as TCP takes it, for this long.
    Bulk(Duration),
    /// `bytes` at once every `pause`, for this long.
    Bursts {
        bytes: usize,
        pause: Duration,
        total: Duration,
    },
}

/// The socket buffers of the two ends (`None`: the kernel's autotuning), and the sender's
/// congestion control (`None`: the machine's default).
#[derive(Clone, Copy, Default)]
pub(crate) struct Buffers {
    pub(crate) send: Option<usize>,
    pub(crate) receive: Option<usize>,
    pub(crate) congestion: Option<&'static str>,
}

/// What one watched transfer gave.
pub(crate) struct Watched {
    report: InspectReport,
    /// Bits/s the receiver counted, from its first byte to its last.
    received_bps: f64,
}

impl Watched {
    /// The watched connection (the sender's end: h1 to h2's port).
    pub(crate) fn sender(&self, port: u16) -> &ConnectionReport {
        self.report
            .connections
            .iter()
            .find(|c| c.first.remote.port() == port)
            .expect("inspect saw the sender's socket")
    }
}

const H2: &str = "198.18.0.2";

/// When inspect takes its last look.
#[derive(Clone, Copy)]
pub(crate) enum LastLook {
    /// At the end of `-t` (seconds): the sender holds its socket open, idle, until then.
    At(&'static str),
    /// Once the sender has drained (everything it wrote is acknowledged, so every segment
    /// lost on the way was sent again) and inspect has looked once more: the last look
    /// sees every retransmission there will be.
    AfterDrain,
}

/// How often inspect looks here.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Starts `pathlab inspect -J` in h1 on connections to `port`, then a transfer from h1 to
/// h2's `port` written as `writes` says, with `buffers`; the sender holds its socket open
/// until inspect's last look, taken as `last_look` says.
pub(crate) fn watch(
    lab: &Lab,
    port: u16,
    writes: Writes,
    buffers: Buffers,
    last_look: LastLook,
    extra: &[&std::ffi::OsStr],
) -> Watched {
    let address: SocketAddr = format!("{H2}:{port}").parse().unwrap();
    let listener = lab
        .line
        .h2
        .run(|| pathlab_os::testing::tcp_listen_with_receive_buffer(address, buffers.receive))
        .unwrap()
        .unwrap();
    let receiver = spawn_receiver(listener);
    let inspect = start_inspect(lab, port, last_look, extra);
    // Its first look before the connection: the whole transfer is watched.
    std::thread::sleep(Duration::from_millis(300));
    let stream = lab
        .line
        .h1
        .run(|| pathlab_os::testing::tcp_connect_with(address, buffers.send, buffers.congestion))
        .unwrap()
        .unwrap();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (drained_tx, drained_rx) = mpsc::channel::<()>();
    let sender = spawn_sender(stream, writes, last_look, done_rx, drained_tx);
    if let LastLook::AfterDrain = last_look {
        drained_rx.recv().expect("the sender drained");
        // A look after the drain, then the end (SIGTERM, as Ctrl-C: inspect reports what
        // it saw up to its last look).
        std::thread::sleep(2 * LOOK_EVERY);
        pathlab_os::kill(inspect.id(), util::emulated::libc_sigterm()).expect("signal");
    }
    let output = inspect.wait_with_output().expect("inspect ends");
    let _ = done_tx.send(());
    sender.join().unwrap();
    let received_bps = receiver.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: InspectReport = serde_json::from_str(&stdout).expect("inspect -J prints JSON");
    Watched {
        report,
        received_bps,
    }
}

/// The receiving end: accepts one connection on `listener` and reads it to its end;
/// returns the bits/s it counted from its first read to its last.
fn spawn_receiver(listener: std::net::TcpListener) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || -> f64 {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buffer = vec![0u8; 1 << 16];
        // Bytes after the first read, between it and the last.
        let mut counted = 0u64;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if first.is_some() {
                        counted += n as u64;
                    }
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                }
            }
        }
        first.map_or(0.0, |f| counted as f64 * 8.0 / (last - f).as_secs_f64())
    })
}

/// Starts `pathlab inspect -J` in h1 on connections to `port`, looking every
/// [`LOOK_EVERY`] until its last look (`last_look`), with `extra` arguments.
fn start_inspect(
    lab: &Lab,
    port: u16,
    last_look: LastLook,
    extra: &[&std::ffi::OsStr],
) -> std::process::Child {
    // Drained: inspect watches until told to stop, well past the sender's time.
    let watch_for = match last_look {
        LastLook::At(seconds) => seconds,
        LastLook::AfterDrain => "60",
    };
    lab.line
        .h1
        .command(PATHLAB)
        .args([
            "inspect",
            "-i",
            &format!("{}ms", LOOK_EVERY.as_millis()),
            "-t",
            watch_for,
            "-J",
        ])
        .args(extra)
        .args(["dport", "=", &format!(":{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pathlab inspect starts")
}

/// The sending end: writes to `stream` as `writes` says; when the last look comes after
/// the drain, waits for the drain and says so on `drained_tx`; then holds the socket open
/// until told on `done_rx`.
fn spawn_sender(
    stream: std::net::TcpStream,
    writes: Writes,
    last_look: LastLook,
    done_rx: mpsc::Receiver<()>,
    drained_tx: mpsc::Sender<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut stream = stream;
        let start = Instant::now();
        let chunk = vec![0x5au8; 1 << 16];
        match writes {
            Writes::Bulk(total) => {
                while start.elapsed() < total {
                    stream.write_all(&chunk).unwrap();
                }
            }
            Writes::Bursts {
                bytes,
                pause,
                total,
            } => {
                while start.elapsed() < total {
                    stream.write_all(&chunk[..bytes]).unwrap();
                    std::thread::sleep(pause);
                }
            }
        }
        if let LastLook::AfterDrain = last_look {
            drain(&stream);
            drained_tx.send(()).expect("the test waits for the drain");
        }
        // Held open until inspect's last look.
        let _ = done_rx.recv();
        drop(stream);
    })
}

/// Waits until everything written to `stream` has left and been acknowledged (nothing
/// unsent, nothing unacknowledged): from then on no segment is sent again.
fn drain(stream: &std::net::TcpStream) {
    use std::os::fd::AsFd as _;
    let started = Instant::now();
    loop {
        let info = pathlab_os::sys::tcp_info(stream.as_fd()).expect("TCP_INFO");
        if info.tcpi_unacked == 0 && info.tcpi_notsent_bytes == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the sender did not drain in 30 s: {} segments unacknowledged, {} bytes unsent",
            info.tcpi_unacked,
            info.tcpi_notsent_bytes
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_small_receive_window_across_20_ms_is_named_and_its_rate_is_the_window_over_the_rtt() {
    let Some(_serial) = privileged_paired("inspect_window") else {
        return;
    };
    let lab = Lab::start_with("inspect-window", "delay 10ms", &[], true, false);
    let saved = lab.dir.path("inspect.json");
    let watched = watch(
        &lab,
        5301,
        Writes::Bulk(Duration::from_secs(3)),
        Buffers {
            receive: Some(64 << 10),
            ..Buffers::default()
        },
        LastLook::At("4"),
        &["--save".as_ref(), saved.as_os_str()],
    );
    let connection = watched.sender(5301);
    let verdict = &connection.verdict;
    // The intervals the window held: what inspect says the connection moved then, and the
    // window and RTT it read.
    let held: Vec<_> = connection
        .intervals
        .iter()
        .filter(|i| i.sending && i.limits.largest().0 == Limit::ReceiverWindow)
        .collect();
    let median = |v: Vec<f64>| util::median(&v);
    let moved = median(held.iter().map(|i| i.throughput_bps).collect());
    let window = median(held.iter().map(|i| f64::from(i.peer_window)).collect());
    let rtt = median(held.iter().map(|i| f64::from(i.srtt_us) * 1e-6).collect());
    let theory = window * 8.0 / rtt;
    eprintln!(
        "{}\n  {} intervals held by a window of {window} B at {rtt} s: window/RTT {theory:.0} bit/s, inspect {moved:.0}, receiver {:.0}",
        verdict.sentence,
        held.len(),
        watched.received_bps
    );
    assert_eq!(verdict.limit, Limit::ReceiverWindow, "{}", verdict.sentence);
    // The window held most of the time the socket had data to send or in flight (the
    // kernel's busy time; 79% of it on an idle machine, the rest mostly the congestion
    // window). The rest of the watch the socket had nothing to send: the last second, held
    // idle, and whatever a busy machine kept the writing thread from its core (the
    // window's share of the whole watch was 59% so, against 71% idle).
    let l = &verdict.limits;
    let busy = l.receiver_window + l.send_buffer + l.congestion;
    assert!(
        l.receiver_window > 0.6 * busy && busy > 0.3,
        "{}: {l:?}",
        verdict.sentence
    );
    // The window's share is judged above by the kernel's own counters; the intervals it
    // held are for the median rate below, and a busy machine that keeps the writing thread
    // from its core gives some intervals to the application (8 of 15 held in one CI-like
    // run with a compiler beside it, the kernel's share 57% of the watch).
    let largest: Vec<Limit> = connection
        .intervals
        .iter()
        .filter(|i| i.sending)
        .map(|i| i.limits.largest().0)
        .collect();
    assert!(
        held.len() >= 5,
        "too few intervals held by the window for a median: {largest:?}"
    );
    // Window over RTT against what inspect says it moved and what the receiver counted.
    for (what, rate) in [("inspect", moved), ("receiver", watched.received_bps)] {
        assert!(
            (rate - theory).abs() <= 0.1 * theory,
            "{what}: {rate:.0} bit/s against window/RTT {theory:.0}"
        );
    }
    let cap = verdict.cap_bps.expect("a window gives a cap");
    assert!(
        (cap - theory).abs() <= 0.02 * theory,
        "{cap} against {theory}"
    );
}

#[test]
fn a_small_send_buffer_is_named() {
    let Some(_serial) = privileged_paired("inspect_send_buffer") else {
        return;
    };
    let lab = Lab::start_with("inspect-sndbuf", "delay 10ms", &[], true, false);
    let watched = watch(
        &lab,
        5302,
        Writes::Bulk(Duration::from_secs(3)),
        Buffers {
            send: Some(16 << 10),
            ..Buffers::default()
        },
        LastLook::At("4"),
        &[],
    );
    let verdict = &watched.sender(5302).verdict;
    eprintln!("{}", verdict.sentence);
    assert_eq!(verdict.limit, Limit::SendBuffer, "{}", verdict.sentence);
    assert!(verdict.share > 0.5, "{}", verdict.sentence);
}

#[test]
fn an_application_that_writes_in_bursts_with_pauses_is_named() {
    let Some(_serial) = privileged_paired("inspect_application") else {
        return;
    };
    let lab = Lab::start_with("inspect-app", "delay 10ms", &[], true, false);
    let watched = watch(
        &lab,
        5303,
        Writes::Bursts {
            bytes: 16 << 10,
            pause: Duration::from_millis(100),
            total: Duration::from_secs(3),
        },
        Buffers::default(),
        LastLook::At("4"),
        &[],
    );
    let verdict = &watched.sender(5303).verdict;
    eprintln!("{}", verdict.sentence);
    assert_eq!(verdict.limit, Limit::Application, "{}", verdict.sentence);
    // 16 KiB every 100 ms over a 20 ms RTT: busy about one RTT in five at most.
    assert!(verdict.share > 0.7, "{}", verdict.sentence);
    assert!(verdict.sentence.starts_with("application-limited"));
}

/// The saved lab run at `path`.
fn lab_run(path: &std::path::Path) -> pathlab_results::lab::LabRun {
    let text = std::fs::read_to_string(path).expect("result.json");
    match pathlab_results::ResultFile::from_json(&text)
        .unwrap()
        .result
    {
        pathlab_results::RunResult::Lab(run) => *run,
        _ => panic!("not a lab run"),
    }
}

#[test]
fn the_app_limits_recipe_names_each_applications_limit_and_blocks_move_a_block_per_rtt() {
    let Some(_serial) = privileged_paired("inspect_app_limits_recipe") else {
        return;
    };
    let dir = util::TempDir::new("lab-app-limits");
    let out = dir.path("run");
    // The quick grid's shortest and longest path (users' --quick runs 5 ms between them,
    // the same verdicts and the same bound).
    util::emulated::run_quick_recipe_points(
        "app-limits",
        &[("delay", "[1, 25]"), ("loss", "[0]")],
        &out,
    );
    for delay in [1u32, 25] {
        let result = out.join(format!("delay-{delay}_loss-0/result.json"));
        let run = lab_run(&result);
        // The line's emulator both ways (its median lateness per crossing, from the run's
        // result): each block and its answer cross once each. Past 1 ms, half the shortest
        // round trip, the verdicts' looks see another line than the spec's.
        let late_s = Lateness::of_lab_link(&result, "client-wan")
            .slack(Quantile::P50, &[0, 1], Duration::from_millis(1))
            .as_secs_f64();
        let workload = |name: &str| {
            run.workloads
                .iter()
                .find(|w| w.name == name)
                .unwrap_or_else(|| panic!("workload {name}"))
        };
        let verdicts = |name: &str| -> Vec<(Limit, String)> {
            workload(name)
                .inspect
                .as_ref()
                .expect("watched")
                .connections
                .iter()
                .map(|c| (c.verdict.limit, c.verdict.sentence.clone()))
                .collect()
        };
        for (name, expected) in [
            ("bulk", &[Limit::Congestion][..]),
            // 64 KiB buffers at both ends: whichever of the two binds first.
            ("window", &[Limit::ReceiverWindow, Limit::SendBuffer][..]),
            ("blocks", &[Limit::Application][..]),
        ] {
            let found = verdicts(name);
            eprintln!("delay {delay} ms, {name}: {found:?}");
            assert_eq!(found.len(), 1, "{name}: its one data connection");
            assert!(
                expected.contains(&found[0].0),
                "{name} at {delay} ms: {}",
                found[0].1
            );
        }
        // One block per round trip at most (base RTT and the block's 1.4 ms through the
        // 100 Mbit/s line: theory, which the emulator's lateness only lengthens), and at
        // least half of one per round trip lengthened by that lateness (11 segments after
        // an idle round trip can take two, slow start begun again).
        let blocks = workload("blocks");
        let pathlab_results::lab::LabOutcome::Blocks(report) = &blocks.outcome else {
            panic!("blocks ran: {:?}", blocks.outcome)
        };
        let bound =
            pathlab_results::lab::blocks_bound_bps(report.size, &blocks.path.expect("a path"));
        let block_bits = f64::from(report.size) * 8.0;
        let late_bound = block_bits / (block_bits / bound + late_s);
        eprintln!(
            "delay {delay} ms: blocks {:.2} Mbit/s, a block per round trip {:.2} ({:.2} with the emulator's lateness)",
            report.throughput_bps * 1e-6,
            bound * 1e-6,
            late_bound * 1e-6
        );
        assert!(
            report.throughput_bps <= bound && report.throughput_bps >= 0.5 * late_bound,
            "blocks at {delay} ms: {} against {bound} ({late_bound} with the emulator's lateness)",
            report.throughput_bps
        );
        // The quickest block of about a hundred took one round trip and its serialization,
        // plus the emulator's lateness and 2 ms for the writer's own wake-up: a block
        // paced out (BBR's pacing left on under cubic took 8 ms more at 25 ms) fails.
        let fastest_s = report.block_time.min_ns as f64 * 1e-9;
        let theory_s = block_bits / bound;
        assert!(
            fastest_s <= theory_s + late_s + 2e-3,
            "blocks at {delay} ms: the fastest took {:.2} ms, one round trip is {:.2} ms",
            fastest_s * 1e3,
            theory_s * 1e3
        );
    }
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("What limited each connection (pathlab inspect)"));
    assert!(out.join("plots/sweep/workloads-vs-delay.png").exists());
}
