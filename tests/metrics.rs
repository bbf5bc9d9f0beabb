//! `--metrics` of `pathlab server` end to end: the server as a child process, clients
//! against it, its `/metrics` scraped and read with the strict exposition reader, the
//! counters checked against what the clients did.

use std::process::{Child, Command, Stdio};

use pathlab_http::prometheus::{parse, Family};

use crate::util;
use crate::util::output::OutputLog;
use crate::util::TempDir;

const PATHLAB: &str = env!("CARGO_BIN_EXE_pathlab");

/// `pathlab server` with `--metrics` as a child, its stderr collected; killed on drop.
struct Server {
    child: Child,
    address: String,
    metrics: String,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let mut command = Command::new(PATHLAB);
        command
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--metrics",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        pathlab_os::die_with_spawner(&mut command);
        let mut child = command.spawn().expect("pathlab server starts");
        let log = OutputLog::follow(&mut child);
        let metrics = log.http_address();
        let address = log.wait_for("listening address", |line| {
            let rest = line.strip_prefix("pathlab server listening on ")?;
            rest.split_whitespace().next().map(str::to_owned)
        });
        Server {
            child,
            address,
            metrics,
        }
    }

    /// `GET /metrics`, read strictly.
    fn scrape(&self, token: Option<&str>) -> Vec<Family> {
        let response = pathlab_http::request(&self.metrics, "GET", "/metrics", token, None)
            .expect("the metrics address answers");
        assert_eq!(response.status, 200, "{response:?}");
        let text = String::from_utf8(response.body).expect("UTF-8");
        parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one sample of family `name` whose labels include `labels`.
pub(crate) fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> f64 {
    pathlab_http::prometheus::value(families, name, labels)
        .unwrap_or_else(|| panic!("not one sample of {name}{labels:?}"))
}

pub(crate) fn tests(families: &[Family], kind: &str, outcome: &str) -> f64 {
    value(
        families,
        "pathlab_server_tests_total",
        &[("kind", kind), ("outcome", outcome)],
    )
}

pub(crate) fn run(args: &[&str]) -> std::process::Output {
    let output = Command::new(PATHLAB)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("pathlab runs");
    assert!(
        output.status.success() || args.contains(&"owd"),
        "pathlab {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn server_metrics_count_what_clients_did() {
    let server = Server::start(&["--max-rate", "10M"]);
    let before = server.scrape(None);
    assert!(
        before.iter().all(|f| !f.help.is_empty()),
        "every family has HELP"
    );
    assert_eq!(tests(&before, "rtt", "completed"), 0.0);
    assert_eq!(value(&before, "pathlab_server_connections_total", &[]), 0.0);
    let start = value(&before, "pathlab_server_start_time_seconds", &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 30.0..=now).contains(&start),
        "started at {start}, now {now}"
    );

    // One second of round trips, 64 bytes each way every 10 ms.
    let output = run(&[
        "rtt",
        &server.address,
        "-t",
        "1s",
        "-i",
        "10ms",
        "--size",
        "64",
        "-J",
    ]);
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).expect("rtt -J");
    let reflected = result["reflector_received"]
        .as_f64()
        .expect("reflector_received");
    assert!(reflected > 50.0, "{result}");
    // An owd test over --max-rate: refused, and counted as such.
    let output = run(&[
        "owd",
        &server.address,
        "--rate",
        "100M",
        "--size",
        "1000",
        "--count",
        "100",
    ]);
    assert!(!output.status.success());

    let after = server.scrape(None);
    assert_eq!(tests(&after, "rtt", "completed"), 1.0);
    assert_eq!(tests(&after, "rtt", "failed"), 0.0);
    assert_eq!(tests(&after, "owd", "refused"), 1.0);
    assert_eq!(tests(&after, "owd", "completed"), 0.0);
    assert_eq!(
        value(
            &after,
            "pathlab_server_refused_total",
            &[("reason", "rate")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "pathlab_server_refused_total",
            &[("reason", "busy")]
        ),
        0.0
    );
    assert_eq!(value(&after, "pathlab_server_connections_total", &[]), 2.0);
    assert_eq!(value(&after, "pathlab_server_tests_running", &[]), 0.0);
    assert_eq!(value(&after, "pathlab_server_handshakes", &[]), 0.0);
    // Every request the reflector took, 64 bytes in and 64 out.
    let received = value(
        &after,
        "pathlab_server_received_bytes_total",
        &[("kind", "rtt")],
    );
    let sent = value(
        &after,
        "pathlab_server_sent_bytes_total",
        &[("kind", "rtt")],
    );
    assert_eq!(received, reflected * 64.0);
    assert_eq!(sent, received);
    assert_eq!(
        value(
            &after,
            "pathlab_server_received_bytes_total",
            &[("kind", "owd")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &after,
            "pathlab_server_rejected_total",
            &[("what", "probes")]
        ),
        0.0
    );
}

#[test]
fn a_metrics_token_is_required_when_given_and_beyond_loopback() {
    let dir = TempDir::new("metrics-token");
    let token_file = dir.path("token");
    let token = "0123456789abcdefghijklmn";
    util::write_secret(&token_file, &format!("{token}\n"));
    let server = Server::start(&["--metrics-token", token_file.to_str().unwrap()]);
    let refused =
        pathlab_http::request(&server.metrics, "GET", "/metrics", None, None).expect("answers");
    assert_eq!(refused.status, 401);
    let wrong = pathlab_http::request(
        &server.metrics,
        "GET",
        "/metrics",
        Some("0123456789abcdefghijklmX"),
        None,
    )
    .expect("answers");
    assert_eq!(wrong.status, 401);
    let families = server.scrape(Some(token));
    assert_eq!(tests(&families, "tcp", "completed"), 0.0);
    let elsewhere =
        pathlab_http::request(&server.metrics, "GET", "/", Some(token), None).expect("answers");
    assert_eq!(elsewhere.status, 404);

    // Reachable from other machines without a token: refused before anything starts.
    let output = Command::new(PATHLAB)
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "0.0.0.0:0",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-token"), "{stderr}");
    // A token without an address to serve is a usage error too.
    let output = Command::new(PATHLAB)
        .args(["server", "--metrics-token", token_file.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}
