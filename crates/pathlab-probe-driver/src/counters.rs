//! What `pathlab server` did and refused since it started: atomics the event loop and the
//! test threads add to, and their Prometheus exposition (`--metrics`), a pure function of
//! them.

use std::sync::atomic::{AtomicU64, Ordering};

use pathlab_http::prometheus::{Exposition, Kind, Metric};
use pathlab_probe::control::{Refusal, TestRequest};
use pathlab_probe::session::Rejections;

/// The kind of a test, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestKind {
    /// One-way probes at a constant rate (`pathlab owd`, `bloat`).
    Owd,
    /// One-way probes in trains (`pathlab capacity`).
    Trains,
    /// Bulk TCP streams (`pathlab tcp`, `bloat`'s load).
    Tcp,
    /// Path MTU discovery.
    Mtu,
    /// Isochronous round trips (`pathlab rtt`).
    Rtt,
}

impl TestKind {
    /// Every kind, in the order the metrics list them.
    pub const ALL: [TestKind; 5] = [
        TestKind::Owd,
        TestKind::Trains,
        TestKind::Tcp,
        TestKind::Mtu,
        TestKind::Rtt,
    ];

    /// The kind of `test`.
    pub fn of(test: &TestRequest) -> TestKind {
        match test {
            TestRequest::OneWay { .. } => TestKind::Owd,
            TestRequest::Trains(_) => TestKind::Trains,
            TestRequest::Tcp { .. } => TestKind::Tcp,
            TestRequest::PathMtu { .. } => TestKind::Mtu,
            TestRequest::RoundTrip { .. } => TestKind::Rtt,
        }
    }

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::Owd => "owd",
            TestKind::Trains => "trains",
            TestKind::Tcp => "tcp",
            TestKind::Mtu => "mtu",
            TestKind::Rtt => "rtt",
        }
    }
}

/// How a test ended, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestOutcome {
    /// Ran to its end and sent its results.
    Completed,
    /// Ended early: the client left or went silent, a socket failed, a protocol error.
    Failed,
    /// Ended early because the server was stopping.
    Aborted,
    /// Never started: over a limit (`pathlab_server_refused_total` says which).
    Refused,
}

impl TestOutcome {
    /// Every outcome, in the order the metrics list them.
    pub const ALL: [TestOutcome; 4] = [
        TestOutcome::Completed,
        TestOutcome::Failed,
        TestOutcome::Aborted,
        TestOutcome::Refused,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            TestOutcome::Completed => "completed",
            TestOutcome::Failed => "failed",
            TestOutcome::Aborted => "aborted",
            TestOutcome::Refused => "refused",
        }
    }
}

/// Why the server refused a test or a connection, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// Over `--max-rate`.
    Rate,
    /// Over `--max-duration`.
    Duration,
    /// `--max-tests` running.
    Busy,
    /// `--max-clients` connections from the source address (a connection, before any
    /// request).
    PerSource,
    /// Over `--max-test-memory`.
    Memory,
    /// A request that makes no sense (zero size, zero rate) or is out of bounds.
    BadRequest,
}

impl RefusalReason {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [RefusalReason; 6] = [
        RefusalReason::Rate,
        RefusalReason::Duration,
        RefusalReason::Busy,
        RefusalReason::PerSource,
        RefusalReason::Memory,
        RefusalReason::BadRequest,
    ];

    /// The reason of `refusal`.
    pub fn of(refusal: &Refusal) -> RefusalReason {
        match refusal {
            Refusal::RateTooHigh { .. } => RefusalReason::Rate,
            Refusal::TooLong { .. } => RefusalReason::Duration,
            Refusal::Busy { .. } => RefusalReason::Busy,
            Refusal::TooManyClients { .. } => RefusalReason::PerSource,
            Refusal::TooMuchMemory { .. } => RefusalReason::Memory,
            Refusal::BadRequest { .. } => RefusalReason::BadRequest,
        }
    }

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            RefusalReason::Rate => "rate",
            RefusalReason::Duration => "duration",
            RefusalReason::Busy => "busy",
            RefusalReason::PerSource => "per_source",
            RefusalReason::Memory => "memory",
            RefusalReason::BadRequest => "bad_request",
        }
    }
}

const KINDS: usize = TestKind::ALL.len();
const OUTCOMES: usize = TestOutcome::ALL.len();
const REASONS: usize = RefusalReason::ALL.len();

/// What the measurement server (`pathlab server`) did and refused since it started, for
/// its log and `/metrics`; not the bond's tunnel server's counters.
#[derive(Debug, Default)]
pub struct MeasurementServerCounters {
    /// When the server started listening, ns since the Unix epoch.
    pub started_unix_ns: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections in their handshake now.
    pub handshakes: AtomicU64,
    /// Tests running now.
    pub running: AtomicU64,
    /// Tests run (accepted).
    pub tests: AtomicU64,
    /// Tests ended or refused, by kind and outcome (`[kind][outcome]`, in the order of
    /// [`TestKind::ALL`] and [`TestOutcome::ALL`]).
    ended: [[AtomicU64; OUTCOMES]; KINDS],
    /// Refusals by reason (in the order of [`RefusalReason::ALL`]).
    refused: [AtomicU64; REASONS],
    /// Payload bytes the tests sent, by kind.
    sent_bytes: [AtomicU64; KINDS],
    /// Payload bytes the tests received, by kind.
    received_bytes: [AtomicU64; KINDS],
    /// Handshakes dropped to make room for new connections.
    pub handshakes_dropped: AtomicU64,
    /// Handshakes that timed out.
    pub handshake_timeouts: AtomicU64,
    /// Control messages that failed authentication.
    pub auth_failures: AtomicU64,
    /// Probes rejected (another session, sender, direction, tag).
    pub rejected_probes: AtomicU64,
    /// Data stream greetings rejected.
    pub rejected_greetings: AtomicU64,
    /// Round-trip requests dropped unanswered: faster than the test's rate, or beyond its
    /// count.
    pub excess_requests: AtomicU64,
    /// Tests ended because their client stopped taking control messages.
    pub stalled_clients: AtomicU64,
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn index<T: PartialEq>(all: &[T], item: &T) -> usize {
    all.iter().position(|x| x == item).expect("listed in ALL")
}

impl MeasurementServerCounters {
    pub(super) fn add(&self, rejections: &Rejections) {
        self.auth_failures
            .fetch_add(rejections.control, Ordering::Relaxed);
        self.rejected_probes
            .fetch_add(rejections.probes, Ordering::Relaxed);
        self.rejected_greetings
            .fetch_add(rejections.greetings, Ordering::Relaxed);
        self.excess_requests
            .fetch_add(rejections.excess, Ordering::Relaxed);
    }

    /// A test of `kind` ended (or was refused) with `outcome`.
    pub fn count_test(&self, kind: TestKind, outcome: TestOutcome) {
        self.ended[index(&TestKind::ALL, &kind)][index(&TestOutcome::ALL, &outcome)]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A test or connection was refused for `reason`.
    pub fn count_refusal(&self, reason: RefusalReason) {
        self.refused[index(&RefusalReason::ALL, &reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// A test of `kind` moved these payload bytes.
    pub fn count_bytes(&self, kind: TestKind, sent: u64, received: u64) {
        let k = index(&TestKind::ALL, &kind);
        self.sent_bytes[k].fetch_add(sent, Ordering::Relaxed);
        self.received_bytes[k].fetch_add(received, Ordering::Relaxed);
    }

    /// Tests of `kind` that ended with `outcome`.
    pub fn tests_ended(&self, kind: TestKind, outcome: TestOutcome) -> u64 {
        get(&self.ended[index(&TestKind::ALL, &kind)][index(&TestOutcome::ALL, &outcome)])
    }

    /// Refusals for `reason`.
    pub fn refusals(&self, reason: RefusalReason) -> u64 {
        get(&self.refused[index(&RefusalReason::ALL, &reason)])
    }

    /// Payload bytes tests of `kind` sent and received.
    pub fn bytes(&self, kind: TestKind) -> (u64, u64) {
        let k = index(&TestKind::ALL, &kind);
        (get(&self.sent_bytes[k]), get(&self.received_bytes[k]))
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "{} connections, {} tests; refused: {} over --max-clients, {} busy, {} over --max-rate, {} over --max-duration, {} over --max-test-memory, {} bad; {} handshakes dropped for room, {} timed out; {} control messages, {} probes, {} greetings failed their checks; {} requests beyond their test's rate or count; {} clients stopped reading",
            get(&self.connections),
            get(&self.tests),
            self.refusals(RefusalReason::PerSource),
            self.refusals(RefusalReason::Busy),
            self.refusals(RefusalReason::Rate),
            self.refusals(RefusalReason::Duration),
            self.refusals(RefusalReason::Memory),
            self.refusals(RefusalReason::BadRequest),
            get(&self.handshakes_dropped),
            get(&self.handshake_timeouts),
            get(&self.auth_failures),
            get(&self.rejected_probes),
            get(&self.rejected_greetings),
            get(&self.excess_requests),
            get(&self.stalled_clients),
        )
    }
}

/// The server's families of one sample.
const SERVER: [Metric<MeasurementServerCounters>; 5] = [
    Metric::gauge(
        "pathlab_server_start_time_seconds",
        "When the server started listening, seconds since the Unix epoch.",
        |c| Some(get(&c.started_unix_ns) as f64 / 1e9),
    ),
    Metric::counter(
        "pathlab_server_connections_total",
        "Control connections accepted (refused ones included).",
        |c| Some(get(&c.connections) as f64),
    ),
    Metric::gauge(
        "pathlab_server_handshakes",
        "Control connections in their handshake now (before a test starts).",
        |c| Some(get(&c.handshakes) as f64),
    ),
    Metric::gauge("pathlab_server_tests_running", "Tests running now.", |c| {
        Some(get(&c.running) as f64)
    }),
    Metric::counter(
        "pathlab_server_stalled_clients_total",
        "Tests ended because their client stopped taking control messages (none went \
         within the deadline).",
        |c| Some(get(&c.stalled_clients) as f64),
    ),
];

/// The Prometheus exposition of `counters` (`GET /metrics` of `pathlab server
/// --metrics`). Every label combination is written, zeros included, so a rate over a
/// series that has not moved yet reads 0, not nothing.
pub fn metrics(counters: &MeasurementServerCounters) -> String {
    let mut e = Exposition::new();
    e.metrics(&SERVER, &[([], counters)]);
    e.family(
        "pathlab_server_tests_total",
        Kind::Counter,
        "Tests by kind (owd, trains, tcp, mtu, rtt) and outcome: completed, failed (the \
         client left or went silent, a socket or protocol error), aborted (the server \
         stopped), refused (over a limit). A running test is counted when it ends.",
    );
    for kind in TestKind::ALL {
        for outcome in TestOutcome::ALL {
            e.sample(
                &[("kind", kind.name()), ("outcome", outcome.name())],
                counters.tests_ended(kind, outcome) as f64,
            );
        }
    }
    e.family(
        "pathlab_server_refused_total",
        Kind::Counter,
        "Refusals by reason: rate (over --max-rate), duration (over --max-duration), busy \
         (--max-tests running), per_source (over --max-clients connections from one \
         address, an IPv6 client's /64; refused before any request), memory (over \
         --max-test-memory), bad_request.",
    );
    for reason in RefusalReason::ALL {
        e.sample(
            &[("reason", reason.name())],
            counters.refusals(reason) as f64,
        );
    }
    e.family(
        "pathlab_server_handshakes_dropped_total",
        Kind::Counter,
        "Handshakes ended by the server: displaced (the oldest, to make room beyond \
         --max-handshakes) or timeout (no hello or request in time).",
    )
    .sample(
        &[("reason", "displaced")],
        get(&counters.handshakes_dropped) as f64,
    )
    .sample(
        &[("reason", "timeout")],
        get(&counters.handshake_timeouts) as f64,
    );
    e.family(
        "pathlab_server_rejected_total",
        Kind::Counter,
        "Inputs that failed their checks: control (messages failing authentication), \
         probes (another session, sender, direction or tag), greetings (TCP data streams), \
         excess (round-trip requests beyond their test's rate or count, unanswered).",
    )
    .sample(&[("what", "control")], get(&counters.auth_failures) as f64)
    .sample(&[("what", "probes")], get(&counters.rejected_probes) as f64)
    .sample(
        &[("what", "greetings")],
        get(&counters.rejected_greetings) as f64,
    )
    .sample(&[("what", "excess")], get(&counters.excess_requests) as f64);
    for (name, help, sent) in [
        (
            "pathlab_server_sent_bytes_total",
            "Payload bytes the server's tests sent (UDP probe payloads; TCP data less \
             retransmissions), by kind, counted when each test ends. Path MTU probes are \
             not counted.",
            true,
        ),
        (
            "pathlab_server_received_bytes_total",
            "Payload bytes the server's tests received (UDP probe payloads accepted; TCP \
             data), by kind, counted when each test ends. Path MTU probes are not counted.",
            false,
        ),
    ] {
        e.family(name, Kind::Counter, help);
        for kind in TestKind::ALL {
            let (sent_bytes, received_bytes) = counters.bytes(kind);
            let value = if sent { sent_bytes } else { received_bytes };
            e.sample(&[("kind", kind.name())], value as f64);
        }
    }
    e.finish()
}

/// Payload bytes a test moved, for the counters (filled as far as the test got).
#[derive(Debug, Default)]
pub(crate) struct Moved {
    pub(crate) sent_bytes: u64,
    pub(crate) received_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pathlab_http::prometheus::{parse, Family};

    fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> f64 {
        pathlab_http::prometheus::value(families, name, labels)
            .unwrap_or_else(|| panic!("not one sample of {name}{labels:?}"))
    }

    #[test]
    fn the_exposition_parses_and_says_what_the_counters_hold() {
        let counters = MeasurementServerCounters::default();
        counters
            .started_unix_ns
            .store(1_700_000_000_500_000_000, Ordering::Relaxed);
        counters.connections.store(7, Ordering::Relaxed);
        counters.running.store(1, Ordering::Relaxed);
        counters.count_test(TestKind::Rtt, TestOutcome::Completed);
        counters.count_test(TestKind::Rtt, TestOutcome::Completed);
        counters.count_test(TestKind::Tcp, TestOutcome::Aborted);
        counters.count_test(TestKind::Owd, TestOutcome::Refused);
        counters.count_refusal(RefusalReason::Rate);
        counters.count_refusal(RefusalReason::PerSource);
        counters.count_bytes(TestKind::Rtt, 1000, 1200);
        counters.handshake_timeouts.store(3, Ordering::Relaxed);
        counters.add(&Rejections {
            control: 1,
            probes: 4,
            greetings: 2,
            excess: 9,
        });
        let text = metrics(&counters);
        let families = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(families.iter().all(|f| !f.help.is_empty()));
        assert_eq!(
            value(&families, "pathlab_server_start_time_seconds", &[]),
            1_700_000_000.5
        );
        assert_eq!(
            value(&families, "pathlab_server_connections_total", &[]),
            7.0
        );
        assert_eq!(value(&families, "pathlab_server_tests_running", &[]), 1.0);
        let tests = |kind, outcome| {
            value(
                &families,
                "pathlab_server_tests_total",
                &[("kind", kind), ("outcome", outcome)],
            )
        };
        assert_eq!(tests("rtt", "completed"), 2.0);
        assert_eq!(tests("tcp", "aborted"), 1.0);
        assert_eq!(tests("owd", "refused"), 1.0);
        assert_eq!(tests("owd", "completed"), 0.0, "zeros are written too");
        let tests_family = families
            .iter()
            .find(|f| f.name == "pathlab_server_tests_total")
            .unwrap();
        assert_eq!(tests_family.samples.len(), KINDS * OUTCOMES);
        let refused = |reason| {
            value(
                &families,
                "pathlab_server_refused_total",
                &[("reason", reason)],
            )
        };
        assert_eq!(refused("rate"), 1.0);
        assert_eq!(refused("per_source"), 1.0);
        assert_eq!(refused("busy"), 0.0);
        assert_eq!(
            value(
                &families,
                "pathlab_server_handshakes_dropped_total",
                &[("reason", "timeout")]
            ),
            3.0
        );
        assert_eq!(
            value(
                &families,
                "pathlab_server_rejected_total",
                &[("what", "probes")]
            ),
            4.0
        );
        assert_eq!(
            value(
                &families,
                "pathlab_server_rejected_total",
                &[("what", "excess")]
            ),
            9.0
        );
        assert_eq!(
            value(
                &families,
                "pathlab_server_sent_bytes_total",
                &[("kind", "rtt")]
            ),
            1000.0
        );
        assert_eq!(
            value(
                &families,
                "pathlab_server_received_bytes_total",
                &[("kind", "rtt")]
            ),
            1200.0
        );
    }
}
