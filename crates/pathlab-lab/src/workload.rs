//! Running one workload of a lab in the calling thread's namespace, as `pathlab lab` and
//! `pathlab node` both do: the measurements against a pathlab server (`tcp`, `rtt`,
//! `owd`), ICMP echo (`ping`), blocks against their responder, a program (`command`), and
//! the watch `inspect = true` keeps on a workload's connections; and the servers a node
//! answers workloads with.

use pathlab_os::files::Dir;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pathlab_probe::control::{Direction, Limits, TcpDirection};
use pathlab_probe::rtt::RoundTripClocks;
use pathlab_probe::tcp::TcpTestReport;
use pathlab_probe_driver::{
    Client, MeasureError, Partial, Server, ServerConfig, TcpOptions, TcpTest,
};
use pathlab_results::lab::{LabOutcome, PingReport};

use crate::spec::WorkloadKind;

/// Port of the servers the lab starts.
pub const SERVER_PORT: u16 = 4920;

/// Port of the first responder of `blocks` workloads (the i-th of
/// [`blocks_responders`] listens on this + i).
pub const BLOCKS_PORT: u16 = 4921;

/// How often a workload with `inspect = true` has its connections looked at.
const INSPECT_INTERVAL: Duration = Duration::from_millis(100);

/// `pathlab inspect` on a workload's connections: a thread in the workload's namespace
/// that looks at the TCP sockets to its peer every [`INSPECT_INTERVAL`] until finished.
#[derive(Debug)]
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<pathlab_diagnose::diagnosis::InspectReport>,
}

impl Watcher {
    /// Starts watching connections to `target` (times since `started`, the run's start).
    pub fn start(target: IpAddr, started: Instant) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let selector = pathlab_diagnose::diagnosis::Selector::parse(&format!("dst {target}"))
            .expect("an address is a filter");
        // The sockets open before the workload starts are not its own.
        let before: std::collections::HashSet<u64> = pathlab_probe_driver::sockdiag::tcp_sockets(0)
            .map(|samples| samples.iter().map(|s| s.cookie).collect())
            .unwrap_or_default();
        let thread = std::thread::spawn(move || {
            let mut watch = pathlab_diagnose::diagnosis::Watch::new();
            let mut next = Instant::now();
            loop {
                let at = started.elapsed().as_nanos() as u64;
                if let Ok(mut samples) = pathlab_probe_driver::sockdiag::tcp_sockets(at) {
                    samples.retain(|s| selector.matches(s));
                    watch.observe(samples);
                }
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                next += INSPECT_INTERVAL;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            let mut report = watch.report(INSPECT_INTERVAL.as_nanos() as u64);
            // Only the workload's own connections that moved data: not those open before
            // it started (an earlier workload's, still draining), nor a measurement's
            // control connection (a few hundred bytes beside megabytes).
            let moved = |c: &pathlab_diagnose::diagnosis::ConnectionReport| {
                let (Some(a), Some(b)) = (c.first.info, c.last.info) else {
                    return 0;
                };
                b.bytes_acked.saturating_sub(a.bytes_acked)
                    + b.bytes_received.saturating_sub(a.bytes_received)
            };
            let most = report.connections.iter().map(moved).max().unwrap_or(0);
            report.connections.retain(|c| {
                !before.contains(&c.first.cookie) && moved(c) > 0 && moved(c) * 20 >= most
            });
            report
        });
        Watcher { stop, thread }
    }

    /// One last look, and the watch's report.
    pub fn finish(self) -> pathlab_diagnose::diagnosis::InspectReport {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the watcher does not panic")
    }
}

/// One workload as it runs: its name in the results, what it is, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// Its name (`NAME.out` holds a command's output).
    pub name: &'a str,
    /// What it is.
    pub kind: &'a WorkloadKind,
    /// How long it runs.
    pub duration: Duration,
}

/// How long a lab's measuring workloads wait for each TCP connection to their server (the
/// control connection, each data stream, a blocks writer's): the kernel sends a SYN again
/// after 1, 3 and 7 s, and on a line its other workloads fill two can be lost. The bond-fair
/// recipe starts 14 bulk flows at once on 1 Mbit/s: with the commands' 5 s one failed
/// ("no answer to the connection within 5 s") in 1 of 3 runs on a busy machine. In a lab
/// the server is there; only its line is slow.
pub const LAB_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs one workload in the calling thread (already in its node's namespace) against
/// `target`; a `blocks` workload writes to `port`.
pub fn run_workload(workload: Job<'_>, target: Option<IpAddr>, port: u16, out: &Dir) -> LabOutcome {
    let connect = || {
        let target = target.expect("checked: measuring workloads have a peer");
        Client::connect(
            &SocketAddr::new(target, SERVER_PORT).to_string(),
            None,
            LAB_CONNECT_TIMEOUT,
        )
    };
    let result = match &workload.kind {
        WorkloadKind::Tcp {
            streams,
            congestion,
            window,
        } => {
            let test = TcpTest {
                streams: *streams,
                direction: TcpDirection::Up,
                duration: workload.duration,
                interval: Duration::from_millis(100),
                sample_every: Duration::from_millis(10),
                options: TcpOptions {
                    window: *window,
                    mss: None,
                    congestion: congestion.clone(),
                },
            };
            return tcp_outcome(
                connect()
                    .map_err(Partial::from)
                    .and_then(|client| client.tcp_or_partial(&test)),
            );
        }
        WorkloadKind::Rtt { interval, size } => {
            let count = (workload.duration.as_nanos() / interval.as_nanos().max(1)).max(1) as u64;
            connect()
                .and_then(|client| client.round_trip(*interval, *size, count))
                .map(|report| LabOutcome::Rtt(Box::new(report)))
        }
        WorkloadKind::Owd { rate_bps, size } => {
            let count = ((workload.duration.as_secs_f64() * *rate_bps as f64
                / (f64::from(*size) * 8.0)) as u64)
                .max(1);
            connect()
                .and_then(|client| client.one_way(Direction::Up, *rate_bps, *size, count, 100))
                .map(|result| LabOutcome::Owd(Box::new(result)))
        }
        WorkloadKind::Ping { interval, size } => {
            let target = target.expect("checked: ping workloads have a peer");
            return ping(target, *interval, *size, workload.duration);
        }
        WorkloadKind::Blocks { size, congestion } => {
            let target = target.expect("checked: blocks workloads have a peer");
            return match pathlab_probe_driver::blocks::run(
                SocketAddr::new(target, port),
                *size as usize,
                workload.duration,
                congestion.as_deref(),
                LAB_CONNECT_TIMEOUT,
            ) {
                Ok(report) => LabOutcome::Blocks(Box::new(report)),
                Err(error) => LabOutcome::Failed(format!("blocks: {error}")),
            };
        }
        WorkloadKind::Command { argv } => return run_command(workload, argv, target, out),
    };
    result.unwrap_or_else(|e| LabOutcome::Failed(e.to_string()))
}

/// A `tcp` workload's outcome: its report, also when a stream was starved (a queue or the
/// path let none of its data through until the client gave up: a result of the path, kept
/// with what got through and the gap); any other failure fails it.
fn tcp_outcome(result: Result<TcpTestReport, Partial<TcpTestReport>>) -> LabOutcome {
    match result {
        Ok(report) => LabOutcome::Tcp(Box::new(report)),
        Err(Partial {
            error: MeasureError::Starved(_),
            measured: Some(report),
        }) => LabOutcome::Tcp(report),
        Err(partial) => LabOutcome::Failed(partial.error.to_string()),
    }
}

/// ICMP echo requests every `interval` for `duration`, from the calling thread's
/// namespace; replies later than a second after the last request count as lost.
fn ping(target: IpAddr, interval: Duration, size: u32, duration: Duration) -> LabOutcome {
    let count = (duration.as_nanos() / interval.as_nanos().max(1)).clamp(1, 65_536) as usize;
    let results = pathlab_probe_driver::ping::Pinger::new(target, size as usize)
        .and_then(|mut pinger| pinger.run(count, interval, Duration::from_secs(1)));
    let results = match results {
        Ok(results) => results,
        Err(error) => return LabOutcome::Failed(format!("ping: {error}")),
    };
    let first = results.first().map(|r| r.sent);
    let replies: Vec<_> = results
        .iter()
        .filter_map(|r| r.rtt.map(|rtt| (r, rtt.as_nanos() as i64)))
        .collect();
    let timed_by = RoundTripClocks::of(replies.iter().filter_map(|&(r, _)| r.timed_by));
    LabOutcome::Ping(Box::new(PingReport {
        interval_ns: interval.as_nanos() as u64,
        size,
        sent: results.len() as u64,
        received: replies.len() as u64,
        rtt: pathlab_probe::rtt::percentiles(replies.iter().map(|&(_, rtt)| rtt)),
        series: replies
            .iter()
            .map(|&(r, rtt)| (u64::from(r.seq), rtt))
            .collect(),
        series_sent_ns: replies
            .iter()
            .map(|&(r, _)| first.map_or(0, |f| (r.sent - f).as_nanos() as u64))
            .collect(),
        timed_by,
    }))
}

/// Runs a program for at most the workload's time, its output to `NAME.out`.
fn run_command(
    workload: Job<'_>,
    argv: &[String],
    target: Option<IpAddr>,
    out: &Dir,
) -> LabOutcome {
    let file_name = format!("{}.out", workload.name);
    let file = match out.replace(&file_name) {
        Ok(file) => file,
        Err(error) => return LabOutcome::Failed(format!("creating {file_name}: {error}")),
    };
    let target = target.map(|t| t.to_string()).unwrap_or_default();
    // `{pathlab}` is this very binary (a recipe runs `pathlab bond` or `pathlab tcp` without
    // relying on PATH); `{out}` the run's output directory.
    let pathlab =
        std::env::current_exe().map_or_else(|_| "pathlab".to_owned(), |p| p.display().to_string());
    let out_dir = out.path().display().to_string();
    // `{duration}`: how long a measuring command should run to end inside its slot, in
    // seconds: 80% of it, so it has time to start, collect its last replies (a round trip
    // or two, half a second through a bloated path) and report.
    let slot = workload.duration.as_secs_f64();
    let duration = format!("{:.1}", (0.8 * slot).min(slot - 1.0).max(1.0));
    let substitute = |a: &String| {
        a.replace("{to}", &target)
            .replace("{pathlab}", &pathlab)
            .replace("{out}", &out_dir)
            .replace("{duration}", &duration)
    };
    let args: Vec<String> = argv[1..].iter().map(substitute).collect();
    let mut command = std::process::Command::new(substitute(&argv[0]));
    // The spec's program needs no control token (`pathlab node` of a KNE lab has it in
    // its environment): it does not inherit it.
    command
        .args(&args)
        .stdin(std::process::Stdio::null())
        .env_remove(pathlab_http::server::TOKEN_ENV)
        .env_remove(pathlab_http::tls::TLS_KEY_ENV);
    pathlab_os::die_with_spawner(&mut command);
    match file.try_clone() {
        Ok(copy) => {
            command.stdout(copy).stderr(file);
        }
        Err(error) => return LabOutcome::Failed(error.to_string()),
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return LabOutcome::Failed(format!("starting {}: {error}", argv[0])),
    };
    let deadline = Instant::now() + workload.duration;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return LabOutcome::Command {
                    exit_code: status.code(),
                    output: file_name,
                }
            }
            Ok(None) if Instant::now() >= deadline => {
                // SIGTERM first, so a program that cleans up after itself (a tunnel's
                // routes, its stats) can; SIGKILL if it has not ended a second later.
                let _ = pathlab_os::terminate(child.id());
                let grace = Instant::now() + Duration::from_secs(1);
                while Instant::now() < grace && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
                return LabOutcome::Command {
                    exit_code: None,
                    output: file_name,
                };
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return LabOutcome::Failed(error.to_string()),
        }
    }
}

/// Sleeps until `deadline` or until `stop` is set; false if stopped.
pub fn sleep_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// A workload with its place on the run's timeline and its peer's address and port.
#[derive(Debug, Clone)]
pub struct Timed {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: WorkloadKind,
    /// When it starts, after the run's start.
    pub start: Duration,
    /// How long it runs.
    pub duration: Duration,
    /// Watch its TCP connections.
    pub inspect: bool,
    /// Its peer's address, if it has a peer.
    pub target: Option<IpAddr>,
    /// The port a `blocks` workload writes to (0 for the others).
    pub port: u16,
}

/// What one workload came to: its outcome and, if watched, its connections.
pub type Came = (
    LabOutcome,
    Option<pathlab_diagnose::diagnosis::InspectReport>,
);

/// Runs `timed` from a thread of its own at `started` + its start, in `netns` if given
/// (else the process's namespace), its outputs in `out`; not at all if `stop` is set
/// first.
pub fn spawn_timed(
    timed: Timed,
    started: Instant,
    netns: Option<pathlab_os::netns::Netns>,
    stop: Arc<AtomicBool>,
    out: Arc<Dir>,
) -> std::thread::JoinHandle<Came> {
    std::thread::spawn(move || {
        if !sleep_until(started + timed.start, &stop) {
            return (LabOutcome::NotStarted, None);
        }
        if let Some(Err(error)) = netns.map(|n| n.enter()) {
            return (
                LabOutcome::Failed(format!("entering the namespace: {error}")),
                None,
            );
        }
        // The watcher is started from this thread, so it is in this namespace too.
        let watching = (timed.inspect)
            .then(|| timed.target.map(|t| Watcher::start(t, started)))
            .flatten();
        let job = Job {
            name: &timed.name,
            kind: &timed.kind,
            duration: timed.duration,
        };
        let outcome = run_workload(job, timed.target, timed.port, &out);
        (outcome, watching.map(Watcher::finish))
    })
}

/// What came of each workload: all of them once they end, or, when the run was
/// `interrupted`, those that finished, the others said to be cut off (they end with the
/// namespaces).
pub fn join_timed(threads: Vec<std::thread::JoinHandle<Came>>, interrupted: bool) -> Vec<Came> {
    threads
        .into_iter()
        .map(|thread| {
            if interrupted && !thread.is_finished() {
                (
                    LabOutcome::Failed("cut off by the interruption".into()),
                    None,
                )
            } else {
                thread.join().expect("workload threads do not panic")
            }
        })
        .collect()
}

/// Starts the lab's measurement server (`tcp`, `rtt`, `owd` workloads measure against it)
/// on [`SERVER_PORT`] of every address, in a thread of its own that first calls `enter`
/// (to enter a node's namespace; a node already in its own passes a no-op), until `stop`.
/// Returns once it listens, or with why it could not.
pub fn start_server(
    enter: impl FnOnce() -> std::io::Result<()> + Send + 'static,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let (ready, bound) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let started = enter().and_then(|()| {
            Server::bind(ServerConfig {
                // A lab host may run many workloads against one server at once.
                max_clients: 64,
                ..ServerConfig::new(
                    SocketAddr::new(IpAddr::from([0u8; 4]), SERVER_PORT),
                    Limits {
                        max_rate_bps: 100_000_000_000,
                        max_duration_ns: u64::MAX / 2,
                        max_tests: 64,
                        max_test_memory: 1 << 32,
                    },
                    None,
                )
            })
        });
        match started {
            Ok(server) => {
                let _ = ready.send(Ok(()));
                server.run(|| stop.load(Ordering::SeqCst));
            }
            Err(error) => {
                let _ = ready.send(Err(error));
            }
        }
    });
    bound
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("server thread ended")))?;
    Ok(thread)
}

/// Answers `blocks` workloads of `size`-byte blocks on `listener` until `stop`, from a
/// thread of its own.
pub fn start_responder(
    listener: std::net::TcpListener,
    size: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = pathlab_probe_driver::blocks::respond(&listener, size as usize, &stop);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_probe::tcp::{Starved, StreamReport};
    use pathlab_probe_driver::{Interruption, Starvation};

    #[test]
    fn a_starved_tcp_workload_is_a_result_and_a_silent_server_a_failure() {
        let starved = Starved {
            longest_gap_ns: 17_300_000_000,
            gap_from_ns: 6_100_000_000,
        };
        let report = TcpTestReport {
            up: vec![StreamReport {
                bytes: 61_000,
                starved: Some(starved),
                ..StreamReport::default()
            }],
            ..TcpTestReport::default()
        };
        let outcome = tcp_outcome(Err(Partial {
            error: MeasureError::Starved(Starvation {
                streams: vec![(0, starved)],
            }),
            measured: Some(Box::new(report.clone())),
        }));
        assert_eq!(outcome, LabOutcome::Tcp(Box::new(report.clone())));
        let LabOutcome::Tcp(kept) = outcome else {
            unreachable!()
        };
        assert_eq!(
            kept.starved().map(|s| s.summary()).as_deref(),
            Some("starved: no data for 17.3 s")
        );
        // A server that stopped answering is not a result, whatever was measured.
        let frozen = MeasureError::Interrupted(Interruption {
            closed: false,
            at_s: 25.0,
            last_heard_s: Some(4.0),
            awaited: "results",
            bound: "within 10 s of its end".into(),
        });
        let failed = tcp_outcome(Err(Partial {
            error: frozen,
            measured: Some(Box::new(report)),
        }));
        assert!(
            matches!(&failed, LabOutcome::Failed(why) if why.starts_with("the server stopped answering")),
            "{failed:?}"
        );
    }
}
