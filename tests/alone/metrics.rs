//! The tests of `metrics` that need the machine to themselves (see `alone.rs`).

use crate::util::tunnel::Tunnel;
use crate::util::TempDir;
use pathlab_bond::stats::BondStats;
use pathlab_http::prometheus::{parse, Family};
use pathlab_os::netns::Netns;
use std::time::Duration;

use crate::metrics::*;

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
    let mut server = start_bond_server(&netns, key, &server_name);
    let mut client = start_bond_client(&netns, key, &client_name);
    // Let reports and path MTU probes flow for a moment.
    std::thread::sleep(Duration::from_millis(1500));
    for (tunnel, name) in [(&client, &client_name), (&server, &server_name)] {
        check_the_scrape_agrees_with_bond_stats(&netns, tunnel, name);
    }
    client.stop();
    server.stop();
    assert!(!pathlab_bond_driver::tunnel::stats_socket_path(&client_name).exists());
    assert!(!pathlab_bond_driver::tunnel::stats_socket_path(&server_name).exists());
}

/// `bond server` on 127.0.0.1:7000 of `netns` with the key file `key`, named `name`,
/// serving metrics; returns once its tun is up.
fn start_bond_server(netns: &Netns, key: &str, name: &str) -> Tunnel {
    let server = Tunnel::start(
        netns,
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
            name,
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    server.wait_for("bond: pl-mts is up");
    server
}

/// `bond client` of the server on 127.0.0.1:7000 over `lo` of `netns` with the key file
/// `key`, named `name`, serving metrics; returns once its session is up.
fn start_bond_client(netns: &Netns, key: &str, name: &str) -> Tunnel {
    let client = Tunnel::start(
        netns,
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
            name,
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    client.wait_for("bond: session");
    client
}

/// Scrapes the metrics of `tunnel` (named `name`) between two reads of its stats (by
/// `bond stats`' socket, from `netns`): the scrape says what the stats say.
fn check_the_scrape_agrees_with_bond_stats(netns: &Netns, tunnel: &Tunnel, name: &str) {
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
    check_the_counters_lie_between_the_reads(&families, &before, &after, name, &session);
    check_what_does_not_move_is_equal(&families, &before, &after, name, &session);
}

/// Counters only grow: the scrape (`families`), taken between two stats reads (`before`
/// and `after`), lies between them, for the line 0 of the session `session`.
fn check_the_counters_lie_between_the_reads(
    families: &[Family],
    before: &BondStats,
    after: &BondStats,
    name: &str,
    session: &str,
) {
    let between = |family: &str,
                   labels: &[(&str, &str)],
                   of: &dyn Fn(&pathlab_bond::stats::BondStats) -> u64| {
        let scraped = value(families, family, labels);
        let (low, high) = (of(before) as f64, of(after) as f64);
        assert!(
            (low..=high).contains(&scraped),
            "{name} {family}{labels:?}: {scraped} not within bond stats' {low}..{high}"
        );
        scraped
    };
    let line = [("session", session), ("line", "0")];
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
        &[("session", session), ("direction", "from_tun")],
        &|s| s.sessions[0].counters.inner_in,
    );
    between(
        "pathlab_bond_line_mtu_probes_total",
        &[("session", session), ("result", "sent")],
        &|s| s.sessions[0].lines[0].mtu_probes.0,
    );
}

/// What does not move on an idle tunnel is equal in the scrape (`families`) and the stats
/// read before and after it; a gauge the controller may move is one of the two.
fn check_what_does_not_move_is_equal(
    families: &[Family],
    before: &BondStats,
    after: &BondStats,
    name: &str,
    session: &str,
) {
    let line = [("session", session), ("line", "0")];
    let state = |s: &pathlab_bond::stats::BondStats| {
        f64::from(u8::from(
            s.sessions[0].lines[0].state == pathlab_bond::line::LineState::Up,
        ))
    };
    assert_eq!(state(before), state(after), "{name}: the line flapped");
    assert_eq!(
        value(families, "pathlab_bond_line_up", &line),
        state(before)
    );
    // A gauge the controller may move between the reads: one of the two.
    let rate = value(families, "pathlab_bond_line_rate_bytes_per_second", &line);
    let rates = [before, after].map(|s| s.sessions[0].lines[0].rate_bps as f64 / 8.0);
    assert!(
        rates.contains(&rate),
        "{name}: rate {rate}, stats {rates:?}"
    );
    assert_eq!(value(families, "pathlab_bond_session_open", &[]), 1.0);
    assert_eq!(value(families, "pathlab_bond_sessions", &[]), 1.0);
    let uptime = value(families, "pathlab_bond_uptime_seconds", &[]);
    assert!(
        (before.uptime_s..=after.uptime_s).contains(&uptime),
        "{name}: uptime {uptime}"
    );
}
