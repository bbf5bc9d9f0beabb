//! `--metrics` of `pathlab server` end to end: the server as a child process, clients
//! against it, its `/metrics` scraped and read with the strict exposition reader, the
//! counters checked against what the clients did.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pathlab_http::prometheus::{parse, Family};

use crate::util;
use crate::util::output::OutputLog;
use crate::util::tunnel::Tunnel;
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
fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> f64 {
    pathlab_http::prometheus::value(families, name, labels)
        .unwrap_or_else(|| panic!("not one sample of {name}{labels:?}"))
}

fn tests(families: &[Family], kind: &str, outcome: &str) -> f64 {
    value(
        families,
        "pathlab_server_tests_total",
        &[("kind", kind), ("outcome", outcome)],
    )
}

fn run(args: &[&str]) -> std::process::Output {
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

#[test]
fn bond_metrics_say_what_bond_stats_says() {
    let Some(_serial) = pathlab_os::testing::privileged("bond_metrics_say_what_bond_stats_says")
    else {
        return;
    };
    let dir = TempDir::new("metrics-bond");
    let key = dir.path("bond.key");
    assert!(run(&["bond", "key", key.to_str().unwrap()])
        .status
        .success());
    let key = key.to_str().unwrap();
    // Names of this test process: the stats sockets live in the host's runtime directory.
    let tag = format!("mt{}", std::process::id());
    let (server_name, client_name) = (format!("{tag}-s"), format!("{tag}-c"));
    let netns = pathlab_os::testing::netns_with_loopback().unwrap();
    let mut server = Tunnel::start(
        &netns,
        &[
            "server",
            "--listen",
            "127.0.0.1:7000",
            "--psk",
            key,
            "--tun",
            "pl-mts",
            "--address",
            "198.19.0.1/24",
            "--name",
            &server_name,
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    server.wait_for("bond: pl-mts is up");
    let mut client = Tunnel::start(
        &netns,
        &[
            "client",
            "127.0.0.1:7000",
            "--line",
            "lo",
            "--psk",
            key,
            "--tun",
            "pl-mtc",
            "--address",
            "198.19.0.2/24",
            "--name",
            &client_name,
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    client.wait_for("bond: session");
    // Let reports and path MTU probes flow for a moment.
    std::thread::sleep(Duration::from_millis(1500));
    for (tunnel, name) in [(&client, &client_name), (&server, &server_name)] {
        let url = tunnel.wait_for("metrics: http://");
        let addr = url["metrics: http://".len()..]
            .trim_end_matches("/metrics")
            .to_owned();
        let stats = || {
            netns
                .run(|| pathlab_bond_driver::tunnel::request_stats(name))
                .unwrap()
                .expect("stats")
        };
        let before = stats();
        let response = netns
            .run(|| pathlab_http::request(&addr, "GET", "/metrics", None, None))
            .unwrap()
            .expect("the metrics address answers");
        let after = stats();
        assert_eq!(response.status, 200, "{response:?}");
        let text = String::from_utf8(response.body).unwrap();
        let families = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(
            value(&families, "pathlab_bond_info", &[("name", name)]),
            1.0
        );
        assert_eq!(before.sessions.len(), 1, "{name}: {before:?}");
        let session = format!("{:08x}", before.sessions[0].session);
        // Counters only grow: the scrape, taken between two stats reads, lies between them.
        let between = |family: &str,
                       labels: &[(&str, &str)],
                       of: &dyn Fn(&pathlab_bond::stats::BondStats) -> u64| {
            let scraped = value(&families, family, labels);
            let (low, high) = (of(&before) as f64, of(&after) as f64);
            assert!(
                (low..=high).contains(&scraped),
                "{name} {family}{labels:?}: {scraped} not within bond stats' {low}..{high}"
            );
            scraped
        };
        let line = [("session", session.as_str()), ("line", "0")];
        let sent = between("pathlab_bond_line_sent_packets_total", &line, &|s| {
            s.sessions[0].lines[0].counters.sent_packets
        });
        assert!(
            sent > 0.0,
            "{name}: the line carried the handshake and reports"
        );
        between("pathlab_bond_line_sent_bytes_total", &line, &|s| {
            s.sessions[0].lines[0].counters.sent_bytes
        });
        let received = between("pathlab_bond_line_received_packets_total", &line, &|s| {
            s.sessions[0].lines[0].counters.received_packets
        });
        assert!(received > 0.0, "{name}");
        between("pathlab_bond_line_received_bytes_total", &line, &|s| {
            s.sessions[0].lines[0].counters.received_bytes
        });
        between(
            "pathlab_bond_inner_packets_total",
            &[("session", session.as_str()), ("direction", "from_tun")],
            &|s| s.sessions[0].counters.inner_in,
        );
        between(
            "pathlab_bond_line_mtu_probes_total",
            &[("session", session.as_str()), ("result", "sent")],
            &|s| s.sessions[0].lines[0].mtu_probes.0,
        );
        // What does not move on an idle tunnel is equal.
        let state = |s: &pathlab_bond::stats::BondStats| {
            f64::from(u8::from(
                s.sessions[0].lines[0].state == pathlab_bond::line::LineState::Up,
            ))
        };
        assert_eq!(state(&before), state(&after), "{name}: the line flapped");
        assert_eq!(
            value(&families, "pathlab_bond_line_up", &line),
            state(&before)
        );
        // A gauge the controller may move between the reads: one of the two.
        let rate = value(&families, "pathlab_bond_line_rate_bytes_per_second", &line);
        let rates = [&before, &after].map(|s| s.sessions[0].lines[0].rate_bps as f64 / 8.0);
        assert!(
            rates.contains(&rate),
            "{name}: rate {rate}, stats {rates:?}"
        );
        assert_eq!(value(&families, "pathlab_bond_session_open", &[]), 1.0);
        assert_eq!(value(&families, "pathlab_bond_sessions", &[]), 1.0);
        let uptime = value(&families, "pathlab_bond_uptime_seconds", &[]);
        assert!(
            (before.uptime_s..=after.uptime_s).contains(&uptime),
            "{name}: uptime {uptime}"
        );
    }
    client.stop();
    server.stop();
    assert!(!pathlab_bond_driver::tunnel::stats_socket_path(&client_name).exists());
    assert!(!pathlab_bond_driver::tunnel::stats_socket_path(&server_name).exists());
}
