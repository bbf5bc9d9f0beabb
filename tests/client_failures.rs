//! Clients that fail well (issue 15): every client command facing a server that freezes
//! mid-test (SIGSTOP) or vanishes (SIGKILL) ends within its own time plus the grace
//! period, exits 1 with an error that says what happened, and with `--save` keeps what it
//! measured, marked incomplete.
//!
//! Each test starts `pathlab server` as a child on an ephemeral loopback port, runs one
//! command as a child against it, and stops or kills the server in the middle of a test:
//! after the server has logged the tests that come before (it logs each as it ends), and
//! a fixed wait into the next. The time to exit is bounded by the command's own time up to
//! the end of the test the fault hits, plus the 10 s grace, plus [`MARGIN`]: a bound on
//! hanging, not a speed threshold. The frozen and the killed server run side by side.
//! The figures each case measured are printed (`--nocapture` shows them).

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pathlab_results::{ResultFile, RunResult};

use crate::util::output::OutputLog;
use crate::util::TempDir;

const PATHLAB: &str = env!("CARGO_BIN_EXE_pathlab");

/// How long a client waits for a silent server beyond a test's time
/// (`pathlab_probe::session::TEST_GRACE`), as the commands' errors and the docs state it.
const GRACE: Duration = Duration::from_secs(10);

/// Slack on top of the bound for process start-up, connecting, and a loaded 2-core CI
/// machine running both cases of a test at once.
const MARGIN: Duration = Duration::from_secs(5);

/// What happens to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGSTOP: the process freezes; its kernel still completes TCP handshakes and ACKs
    /// data until the buffers fill, but nothing answers.
    Freeze,
    /// SIGKILL: the process vanishes; its kernel closes (resets) every connection.
    Kill,
}

/// `pathlab server` as a child process, its stderr lines collected; on drop (a panic
/// included) it is continued and killed, so no stopped server outlives a test.
struct Server {
    child: Child,
    address: String,
    log: OutputLog,
}

impl Server {
    fn start() -> Server {
        let mut command = Command::new(PATHLAB);
        command
            .args(["server", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        pathlab_os::die_with_spawner(&mut command);
        let mut child = command.spawn().expect("pathlab server starts");
        let log = OutputLog::follow(&mut child);
        let address = log.wait_for("listening address", |line| {
            line.split_whitespace()
                .find(|word| word.starts_with("127.0.0.1:"))
                .map(str::to_owned)
        });
        Server {
            child,
            address,
            log,
        }
    }

    /// How many tests the server has logged as ended.
    fn tests_ended(&self) -> usize {
        self.log
            .lines()
            .iter()
            .filter(|line| line.starts_with("pathlab server: 127.0.0.1:"))
            .count()
    }

    fn signal(&self, signal: i32) {
        pathlab_os::kill(self.child.id(), signal).expect("the server is ours to signal");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = pathlab_os::kill(self.child.id(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client command as a child, killed on drop if it still runs (a hang fails the test, it
/// does not hold it).
struct ClientRun {
    child: Child,
    started: Instant,
}

impl Drop for ClientRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One command against one server that fails.
struct Case {
    /// The command's arguments; `HOST` is replaced by the server's address and `--save`
    /// added.
    args: &'static [&'static str],
    fault: Fault,
    /// Tests the server must have ended before the fault's wait starts.
    after_tests: usize,
    /// The wait before the fault (from the client's start, or from those tests' end).
    wait: Duration,
    /// The command's own time up to the end of the test the fault hits.
    own_time: Duration,
}

/// What a case saw.
struct Outcome {
    status: ExitStatus,
    stderr: String,
    saved: Option<ResultFile>,
}

impl Case {
    fn run(&self, dir: &Path, name: &str) -> Outcome {
        let server = Server::start();
        let save = dir.join(format!("{name}.json"));
        let (out, err) = (
            dir.join(format!("{name}.out")),
            dir.join(format!("{name}.err")),
        );
        let mut command = Command::new(PATHLAB);
        command
            .args(self.args.iter().map(|arg| {
                if *arg == "HOST" {
                    &server.address
                } else {
                    *arg
                }
            }))
            .arg("--save")
            .arg(&save)
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap());
        pathlab_os::die_with_spawner(&mut command);
        let mut client = ClientRun {
            child: command.spawn().expect("the client starts"),
            started: Instant::now(),
        };
        let bound = self.own_time + GRACE + MARGIN;
        // The fault: once the tests before it have ended, and the wait into the next.
        while server.tests_ended() < self.after_tests {
            assert!(
                client.started.elapsed() < bound,
                "{name}: the server never ended {} tests; it logged {:?}",
                self.after_tests,
                server.log.lines()
            );
            if let Some(status) = client.child.try_wait().unwrap() {
                panic!(
                    "{name}: the client ended ({status}) before the fault: {}",
                    std::fs::read_to_string(&err).unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(self.wait);
        let fault_at = client.started.elapsed();
        server.signal(match self.fault {
            Fault::Freeze => libc::SIGSTOP,
            Fault::Kill => libc::SIGKILL,
        });
        let status = loop {
            if let Some(status) = client.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                client.started.elapsed() < bound,
                "{name}: still running {:.1} s after its start (the bound is its own {:.1} s \
                 + the {:.0} s grace + {:.0} s); stderr so far: {}",
                client.started.elapsed().as_secs_f64(),
                self.own_time.as_secs_f64(),
                GRACE.as_secs_f64(),
                MARGIN.as_secs_f64(),
                std::fs::read_to_string(&err).unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = client.started.elapsed();
        drop(server);
        let stderr = std::fs::read_to_string(&err).unwrap();
        let saved = std::fs::read_to_string(&save)
            .ok()
            .map(|text| ResultFile::from_json(&text).expect("the saved file reads back"));
        eprintln!(
            "{name}: {:?} at {:.2} s, exit {} at {:.2} s (bound {:.1} s), {}: {}",
            self.fault,
            fault_at.as_secs_f64(),
            status.code().map_or("by signal".into(), |c| c.to_string()),
            took.as_secs_f64(),
            bound.as_secs_f64(),
            if saved.is_some() {
                "saved partial"
            } else {
                "nothing saved"
            },
            stderr.trim().lines().last().unwrap_or("")
        );
        Outcome {
            status,
            stderr,
            saved,
        }
    }
}

impl Outcome {
    /// Exit 1 with an error that says the server stopped answering (frozen) or closed the
    /// connection (killed), plus `also` in the message.
    fn failed_saying(&self, fault: Fault, also: &str) -> &Self {
        assert_eq!(self.status.code(), Some(1), "{}", self.stderr);
        let what = match fault {
            Fault::Freeze => "the server stopped answering",
            Fault::Kill => "the server closed the connection",
        };
        assert!(
            self.stderr.contains(what) && self.stderr.contains(also),
            "expected '{what}' and '{also}' in: {}",
            self.stderr
        );
        if fault == Fault::Freeze {
            assert!(
                self.stderr.contains("within 10 s"),
                "the grace is stated: {}",
                self.stderr
            );
        }
        self
    }

    /// The saved file, which must say it is incomplete and why.
    fn partial(&self) -> &RunResult {
        let file = self.saved.as_ref().unwrap_or_else(|| {
            panic!(
                "something was measured, so --save wrote it: {}",
                self.stderr
            )
        });
        let incomplete = file
            .incomplete
            .as_ref()
            .expect("a partial result is marked incomplete");
        assert!(
            self.stderr.contains(&incomplete.error),
            "the file's error is the one printed: {}",
            incomplete.error
        );
        assert!(self.stderr.contains("marked incomplete"), "{}", self.stderr);
        &file.result
    }
}

/// Runs `cases` side by side (each with its own server) in `dir`.
fn run_all(dir: &TempDir, cases: &[(&str, Case)]) -> Vec<Outcome> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = cases
            .iter()
            .map(|(name, case)| scope.spawn(|| case.run(dir.root(), name)))
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("the case ran"))
            .collect()
    })
}

#[test]
fn owd_ends_within_its_time_and_the_grace_keeping_the_probes_received() {
    let dir = TempDir::new("client-fail-owd");
    let [down_frozen, up_frozen, down_killed] = <[Outcome; 3]>::try_from(run_all(
        &dir,
        &[
            (
                "owd-down-frozen",
                Case {
                    args: &["owd", "HOST", "-t", "3", "--direction", "down"],
                    fault: Fault::Freeze,
                    after_tests: 0,
                    wait: Duration::from_secs(1),
                    own_time: Duration::from_secs(3),
                },
            ),
            (
                "owd-up-frozen",
                Case {
                    args: &["owd", "HOST", "-t", "3"],
                    fault: Fault::Freeze,
                    after_tests: 0,
                    wait: Duration::from_secs(1),
                    own_time: Duration::from_secs(3),
                },
            ),
            (
                "owd-down-killed",
                Case {
                    args: &["owd", "HOST", "-t", "3", "--direction", "down"],
                    fault: Fault::Kill,
                    after_tests: 0,
                    wait: Duration::from_secs(1),
                    own_time: Duration::from_secs(3),
                },
            ),
        ],
    ))
    .map_err(|_| "three outcomes")
    .unwrap();
    for (outcome, fault) in [(&down_frozen, Fault::Freeze), (&down_killed, Fault::Kill)] {
        let RunResult::Owd(results) = outcome.failed_saying(fault, "s into the test").partial()
        else {
            panic!("an owd result")
        };
        let [down] = results.as_slice() else {
            panic!("one direction")
        };
        // 1 Mbit/s of 1200-byte probes: about 100 in the second before the fault.
        assert!(
            (50..=200).contains(&down.sequence.received),
            "{:?}",
            down.sequence
        );
        assert_eq!(
            down.sequence.sent,
            down.sequence.received + down.sequence.lost,
            "sent counts up to the last probe received"
        );
    }
    // Upwards the server's records were all there was to measure: no file.
    up_frozen.failed_saying(Fault::Freeze, "during the test");
    assert!(up_frozen.saved.is_none(), "nothing measured, nothing saved");
}

#[test]
fn rtt_ends_within_its_time_and_the_grace_keeping_its_round_trips() {
    let dir = TempDir::new("client-fail-rtt");
    let case = |fault| Case {
        args: &["rtt", "HOST", "-t", "3"],
        fault,
        after_tests: 0,
        wait: Duration::from_secs(1),
        own_time: Duration::from_secs(3),
    };
    let outcomes = run_all(
        &dir,
        &[
            ("rtt-frozen", case(Fault::Freeze)),
            ("rtt-killed", case(Fault::Kill)),
        ],
    );
    for (outcome, fault) in outcomes.iter().zip([Fault::Freeze, Fault::Kill]) {
        let RunResult::Rtt(report) = outcome.failed_saying(fault, "s into the test").partial()
        else {
            panic!("an rtt result")
        };
        // A request every 10 ms: about 100 answered before the fault.
        assert!((50..=200).contains(&report.replies), "{}", report.replies);
        assert_eq!(
            report.reflector_received, report.replies,
            "what the replies prove"
        );
        assert!(report.sent >= report.replies);
        if fault == Fault::Freeze {
            // Frozen, the client keeps to its schedule: every request went out.
            assert_eq!(report.sent, 300);
        }
    }
}

#[test]
fn tcp_ends_within_its_time_and_the_grace_keeping_its_streams() {
    let dir = TempDir::new("client-fail-tcp");
    let outcomes = run_all(
        &dir,
        &[
            (
                "tcp-up-frozen",
                Case {
                    args: &["tcp", "HOST", "-t", "3", "-i", "500ms"],
                    fault: Fault::Freeze,
                    after_tests: 0,
                    wait: Duration::from_secs(1),
                    own_time: Duration::from_secs(3),
                },
            ),
            (
                "tcp-down-killed",
                Case {
                    args: &["tcp", "HOST", "-t", "3", "-R", "-i", "500ms"],
                    fault: Fault::Kill,
                    after_tests: 0,
                    wait: Duration::from_secs(1),
                    own_time: Duration::from_secs(3),
                },
            ),
        ],
    );
    let RunResult::Tcp(up) = outcomes[0]
        .failed_saying(Fault::Freeze, "s into the test")
        .partial()
    else {
        panic!("a tcp result")
    };
    assert_eq!((up.up.len(), up.down.len()), (1, 0));
    let samples = &up.up[0].samples;
    assert!(
        samples.len() > 10 && samples.last().unwrap().sent_bytes > 0,
        "the sender's TCP_INFO samples: {}",
        samples.len()
    );
    let RunResult::Tcp(down) = outcomes[1]
        .failed_saying(Fault::Kill, "s into the test")
        .partial()
    else {
        panic!("a tcp result")
    };
    assert_eq!((down.up.len(), down.down.len()), (0, 1));
    assert!(down.down[0].bytes > 0 && !down.down[0].interval_bytes.is_empty());
    assert!(down.down_bps > 0.0);
}

#[test]
fn capacity_ends_at_the_step_that_fails_keeping_the_steps_before() {
    let dir = TempDir::new("client-fail-capacity");
    // The fault comes 0.3 s into the packet pairs (100 pairs 10 ms apart: 1 s), after
    // the path MTU search; the pairs' own time bounds the wait.
    let case = |fault| Case {
        args: &["capacity", "HOST", "--direction", "up", "--no-available"],
        fault,
        after_tests: 1,
        wait: Duration::from_millis(300),
        own_time: Duration::from_secs(2),
    };
    let outcomes = run_all(
        &dir,
        &[
            ("capacity-frozen", case(Fault::Freeze)),
            ("capacity-killed", case(Fault::Kill)),
        ],
    );
    for (outcome, fault) in outcomes.iter().zip([Fault::Freeze, Fault::Kill]) {
        let RunResult::CapacityPartial(partial) =
            outcome.failed_saying(fault, "up: packet pairs: ").partial()
        else {
            panic!("a partial capacity result")
        };
        assert!(partial.done.is_empty());
        let interrupted = partial
            .interrupted
            .as_ref()
            .expect("the path MTU step finished");
        assert_eq!(interrupted.path_mtu_bytes, Some(65535));
        assert!(interrupted.capacity.is_none());
    }
}

#[test]
fn bloat_ends_at_the_phase_that_fails_keeping_the_phases_before() {
    let dir = TempDir::new("client-fail-bloat");
    // Idle 2 s (and about 0.5 s more for its last replies and results), then upload 2 s
    // with 1 s of drain: the fault comes 1 s into the upload.
    let case = |fault| Case {
        args: &["bloat", "HOST", "-t", "2", "--direction", "up", "-P", "1"],
        fault,
        after_tests: 1,
        wait: Duration::from_secs(1),
        own_time: Duration::from_millis(5500),
    };
    let outcomes = run_all(
        &dir,
        &[
            ("bloat-frozen", case(Fault::Freeze)),
            ("bloat-killed", case(Fault::Kill)),
        ],
    );
    for (outcome, fault) in outcomes.iter().zip([Fault::Freeze, Fault::Kill]) {
        let RunResult::BloatPartial(progress) =
            outcome.failed_saying(fault, "upload phase: ").partial()
        else {
            panic!("a partial bloat result")
        };
        assert!(progress.baseline_rtt_ns.is_some());
        assert_eq!(progress.phases.len(), 1, "the idle phase finished");
        assert_eq!(progress.records.len(), 1);
        let interrupted = progress
            .interrupted
            .as_ref()
            .expect("the upload's own side");
        assert!(interrupted.probes.replies > 0);
        assert!(
            interrupted
                .load
                .as_ref()
                .is_some_and(|load| !load.up.is_empty() && !load.up[0].samples.is_empty()),
            "the load's sender samples"
        );
    }
}

#[test]
fn rfc6349_ends_at_the_step_that_fails_keeping_the_steps_before() {
    let dir = TempDir::new("client-fail-rfc6349");
    // Path MTU both ways, 1 s of baseline (and about 0.5 s more for its last replies and
    // results), the given rate, then the fault 1 s into the one-connection run of 2 s.
    // (--mss: loopback's own, 65495 B, is more than the kernel takes for TCP_MAXSEG.)
    let case = |fault| Case {
        args: &[
            "tcp",
            "HOST",
            "--rfc6349",
            "--rate",
            "1G",
            "--mss",
            "1400",
            "-t",
            "2",
            "--idle",
            "1s",
        ],
        fault,
        after_tests: 3,
        wait: Duration::from_secs(1),
        own_time: Duration::from_millis(3500),
    };
    let outcomes = run_all(
        &dir,
        &[
            ("rfc6349-frozen", case(Fault::Freeze)),
            ("rfc6349-killed", case(Fault::Kill)),
        ],
    );
    for (outcome, fault) in outcomes.iter().zip([Fault::Freeze, Fault::Kill]) {
        let RunResult::Rfc6349Partial(progress) = outcome
            .failed_saying(fault, "TCP, one connection: ")
            .partial()
        else {
            panic!("a partial rfc6349 result")
        };
        assert_eq!(progress.failed_step, "TCP, one connection");
        assert!(progress.mtu_up.is_some() && progress.mtu_down.is_some());
        assert!(progress.baseline.is_some() && progress.plan.is_some());
        assert!(progress.single.is_none());
        let run = progress
            .interrupted_run
            .as_ref()
            .expect("the run's client side");
        assert!(!run.up.is_empty() && !run.up[0].samples.is_empty());
    }
}
