//! End-to-end tests of the measurement commands over loopback: a server in the test
//! process (or as a child), clients against it, limits, keys.

use std::time::Duration;

use pathlab_probe::auth::Key;
use pathlab_probe::control::{Direction, Limits, Refusal};
use pathlab_probe::session::SessionError;
use pathlab_probe_driver::{Client, MeasureError};

use crate::util::LoopbackServer;
use crate::util::TestLock;

const PATHLAB: &str = env!("CARGO_BIN_EXE_pathlab");

pub(crate) fn generous() -> Limits {
    LoopbackServer::generous()
}

pub(crate) fn key(text: &str) -> Key {
    Key::from_file_contents(text.as_bytes()).unwrap()
}

#[test]
fn fifty_concurrent_clients_all_get_their_results() {
    // Fifty clients load the machine: never beside a timing test.
    let _lock = TestLock::shared();
    // All from 127.0.0.1: the per-address bound raised to let them in.
    let server = LoopbackServer::start_with(pathlab_probe_driver::ServerConfig {
        max_clients: 64,
        ..pathlab_probe_driver::ServerConfig::new("127.0.0.1:0".parse().unwrap(), generous(), None)
    });
    let clients: Vec<_> = (0..50)
        .map(|i| {
            let address = server.address.clone();
            std::thread::spawn(move || {
                let direction = if i % 2 == 0 {
                    Direction::Up
                } else {
                    Direction::Down
                };
                Client::connect(&address, None, Duration::from_secs(10))
                    .and_then(|client| client.one_way(direction, 1_000_000, 200, 200, 50))
            })
        })
        .collect();
    for (i, client) in clients.into_iter().enumerate() {
        let result = client
            .join()
            .expect("client thread")
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert_eq!(result.sequence.sent, 200, "client {i}");
        assert_eq!(result.sequence.received, 200, "client {i}");
    }
}

#[test]
fn limits_are_enforced_and_the_refusal_says_which() {
    let limits = Limits {
        max_rate_bps: 10_000_000,
        max_duration_ns: 2_000_000_000,
        max_tests: 1,
        max_test_memory: pathlab_probe::control::DEFAULT_MAX_TEST_MEMORY,
    };
    let server = LoopbackServer::start(limits, None, "127.0.0.1");
    let connect =
        || Client::connect(&server.address, None, Duration::from_secs(5)).expect("connects");
    match connect().one_way(Direction::Up, 20_000_000, 1000, 100, 10) {
        Err(MeasureError::Session(SessionError::Refused(Refusal::RateTooHigh {
            max_rate_bps,
            asked_bps,
        }))) => {
            assert_eq!((max_rate_bps, asked_bps), (10_000_000, 20_000_000));
        }
        other => panic!("expected a rate refusal, got {other:?}"),
    }
    // 1000 probes of 1000 bytes at 1 Mbit/s last 8 s.
    match connect().one_way(Direction::Up, 1_000_000, 1000, 1000, 10) {
        Err(MeasureError::Session(SessionError::Refused(Refusal::TooLong {
            max_ns,
            asked_ns,
        }))) => {
            assert_eq!((max_ns, asked_ns), (2_000_000_000, 8_000_000_000));
        }
        other => panic!("expected a duration refusal, got {other:?}"),
    }
    // One test at a time: a second one while the first runs is refused.
    let address = server.address.clone();
    let first = std::thread::spawn(move || {
        Client::connect(&address, None, Duration::from_secs(5))
            .unwrap()
            .one_way(Direction::Up, 1_000_000, 100, 1000, 10)
    });
    std::thread::sleep(Duration::from_millis(300));
    match connect().one_way(Direction::Up, 1_000_000, 100, 10, 10) {
        Err(MeasureError::Session(SessionError::Refused(Refusal::Busy { max_tests: 1 }))) => {}
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(
        first
            .join()
            .unwrap()
            .expect("the first test completes")
            .sequence
            .received,
        1000
    );
    // And once it is over, the next one runs.
    assert!(connect()
        .one_way(Direction::Up, 1_000_000, 100, 10, 10)
        .is_ok());
}

#[test]
fn a_pre_shared_key_authenticates_both_ways_and_a_wrong_one_is_refused() {
    let server = LoopbackServer::start(
        generous(),
        Some(key("the right key, 16+ bytes")),
        "127.0.0.1",
    );
    let result = Client::connect(
        &server.address,
        Some(key("the right key, 16+ bytes")),
        Duration::from_secs(5),
    )
    .expect("connects")
    .one_way(Direction::Up, 1_000_000, 200, 100, 10)
    .expect("authenticated test runs");
    assert_eq!(result.sequence.received, 100);
    assert_eq!(result.rejected, 0);
    let wrong = Client::connect(
        &server.address,
        Some(key("a wrong key of 16+ bytes")),
        Duration::from_secs(5),
    )
    .and_then(|client| client.one_way(Direction::Up, 1_000_000, 200, 10, 10));
    assert!(
        matches!(&wrong, Err(MeasureError::Session(SessionError::Auth(why))) if why.contains("the keys differ") && why.contains("same --psk")),
        "the client says why: {wrong:?}"
    );
    let none = Client::connect(&server.address, None, Duration::from_secs(5));
    assert!(
        matches!(none, Err(MeasureError::Session(SessionError::Auth(_)))),
        "{none:?}"
    );
}

/// Datagrams an attacker on the client's address could send into a test: garbage, a probe
/// of the session without a tag, one tagged with another key, one longer than the test's
/// probes. Every one is for `session` and `size` unless it is garbage.
fn forgeries(session: u64, size: u32) -> Vec<Vec<u8>> {
    use pathlab_probe::probe::{self, Probe, ProbeKind, Reflection};
    let probe = |seq: u64, size: usize, key: Option<&Key>| {
        let header = Probe {
            kind: ProbeKind::OneWay,
            session,
            seq,
            sent_ns: 1,
            reflection: Reflection::default(),
        };
        let mut bytes = Vec::new();
        probe::encode(&header, size, key, &mut |pad| pad.fill(7), &mut bytes).unwrap();
        bytes
    };
    let wrong = key("a key the server never saw");
    let mut out = Vec::new();
    for seq in 0..25 {
        out.push(vec![0x5a; size as usize]);
        out.push(probe(seq, size as usize, None));
        out.push(probe(seq, size as usize, Some(&wrong)));
        out.push(probe(seq, size as usize + 100, Some(&wrong)));
    }
    out
}

#[test]
fn forged_probes_are_rejected_and_counted_in_both_directions() {
    let secret = "the right key, 16+ bytes";
    let server = LoopbackServer::start(generous(), Some(key(secret)), "127.0.0.1");
    let attacker = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for direction in [Direction::Up, Direction::Down] {
        let test = Client::connect(&server.address, Some(key(secret)), Duration::from_secs(5))
            .expect("connects")
            .start_one_way(direction, 2_000_000, 200, 500, 50)
            .expect("accepted");
        // The receiving end's socket: the server's for up, ours for down.
        let target = match direction {
            Direction::Up => test.server_probe_address(),
            Direction::Down => std::net::SocketAddr::new(
                test.server_probe_address().ip(),
                test.local_probe_address().unwrap().port(),
            ),
        };
        let forged = forgeries(test.session(), 200);
        for datagram in &forged {
            attacker.send_to(datagram, target).unwrap();
        }
        let result = test.run().expect("the test runs despite the forgeries");
        assert_eq!(
            result.rejected,
            forged.len() as u64,
            "{direction:?}: every forgery is rejected and counted"
        );
        assert_eq!(result.sequence.received, 500, "{direction:?}");
        assert_eq!(
            result.sequence.duplicates, 0,
            "{direction:?}: none taken for a probe"
        );
    }
}

#[test]
fn cli_errors_name_the_problem() {
    let unreachable = std::process::Command::new(PATHLAB)
        .args(["owd", "127.0.0.1:9", "-t", "1s"])
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unreachable.stderr)
        .contains("cannot reach a pathlab server at 127.0.0.1:9"));
    let limits = Limits {
        max_rate_bps: 1_000_000,
        ..generous()
    };
    let server = LoopbackServer::start(limits, None, "127.0.0.1");
    let refused = std::process::Command::new(PATHLAB)
        .args(["owd", &server.address, "--rate", "5M", "-t", "1s"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("the server allows at most 1000000 bit/s, the test asked for 5000000"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let json = std::process::Command::new(PATHLAB)
        .args([
            "owd",
            &server.address,
            "--rate",
            "500k",
            "--size",
            "100",
            "--count",
            "200",
            "-J",
        ])
        .output()
        .unwrap();
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(value[0]["sequence"]["received"], 200);
    assert_eq!(value[0]["owd"]["verdict"], "not-building");
}

#[test]
fn tcp_streams_report_intervals_and_tcp_info_in_every_direction() {
    use pathlab_probe::control::TcpDirection;
    use pathlab_probe_driver::{TcpOptions, TcpTest};
    // Bulk TCP on loopback takes a core: never beside a timing test.
    let _lock = TestLock::shared();
    let server = LoopbackServer::start(generous(), None, "127.0.0.1");
    for (direction, streams) in [
        (TcpDirection::Up, 3),
        (TcpDirection::Down, 1),
        (TcpDirection::Both, 2),
    ] {
        let test = TcpTest {
            streams,
            direction,
            duration: Duration::from_millis(600),
            interval: Duration::from_millis(200),
            sample_every: Duration::from_millis(10),
            options: TcpOptions {
                window: Some(1 << 20),
                mss: Some(1400),
                congestion: Some("reno".into()),
            },
        };
        let report = Client::connect(&server.address, None, Duration::from_secs(5))
            .expect("connects")
            .tcp(&test)
            .expect("tcp test runs");
        let (up, down) = match direction {
            TcpDirection::Up => (streams, 0),
            TcpDirection::Down => (0, streams),
            TcpDirection::Both => (streams, streams),
        };
        assert_eq!(
            (report.up.len(), report.down.len()),
            (up as usize, down as usize),
            "{direction:?}"
        );
        for stream in report.up.iter().chain(&report.down) {
            assert!(
                stream.bytes > 0,
                "{direction:?} stream {} moved data",
                stream.index
            );
            assert_eq!(
                stream.interval_bytes.iter().sum::<u64>(),
                stream.bytes,
                "intervals add up"
            );
            assert!(stream.interval_bytes.len() >= 3, "0.6 s in 0.2 s intervals");
            let last = stream
                .samples
                .last()
                .expect("TCP_INFO samples from the sender");
            assert!(
                stream.samples.len() >= 10,
                "sampled every 10 ms: {}",
                stream.samples.len()
            );
            assert!(last.cwnd > 0 && last.srtt_us > 0);
            assert!(last.mss <= 1400, "TCP_MAXSEG applied: {}", last.mss);
            // What the receiver counted is what the sender's stack sent, less retransmissions
            // and the headers (TCP_INFO counts payload bytes).
            assert!(
                last.sent_bytes >= stream.bytes,
                "sent {} >= received {}",
                last.sent_bytes,
                stream.bytes
            );
        }
        assert!(report.client_cpu_s > 0.0 && report.server_cpu_s > 0.0);
    }
}

#[test]
fn capacity_over_loopback_finds_its_64k_mtu_and_refuses_bad_counts() {
    // Packet trains at full speed take a core: never beside a timing test.
    let _lock = TestLock::shared();
    let server = LoopbackServer::start(generous(), None, "127.0.0.1");
    let output = std::process::Command::new(PATHLAB)
        .args([
            "capacity",
            &server.address,
            "--direction",
            "up",
            "--no-available",
            "-J",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let report = &value[0];
    // Loopback's MTU is 65536; the largest IPv4 packet a probe can be is 65535.
    assert_eq!(report["path_mtu_bytes"], 65535);
    let capacity = &report["capacity"];
    let (low, mid, high) = (
        capacity["low_bps"].as_f64().unwrap(),
        capacity["capacity_bps"].as_f64().unwrap(),
        capacity["high_bps"].as_f64().unwrap(),
    );
    assert!(0.0 < low && low <= mid && mid <= high, "{capacity}");
    assert!(report["available"].is_null());
    // The shaper stream's bound is said before anything is sent (on stderr with -J), and
    // the stream ran: loopback has no bucket.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("probes at most") && stderr.contains("up to 10 MiB a direction"),
        "{stderr}"
    );
    assert_eq!(capacity["shaper"]["kind"], "none", "{capacity}");
    for (args, message) in [
        (vec!["--pairs", "3"], "--pairs must be at least 10, got 3"),
        (
            vec!["--streams", "0"],
            "--streams must be at least 1, got 0",
        ),
        (
            vec!["--shaper-budget", "1kb"],
            "1kb is outside 100 KiB to 1 GiB",
        ),
        (
            vec!["--shaper-budget", "2gb"],
            "2gb is outside 100 KiB to 1 GiB",
        ),
        (
            vec!["--max-rate", "0mbit"],
            "--max-rate 0 bit/s is too low: probes need at least 100 kbit/s",
        ),
        (vec!["--max-rate", "fast"], "--max-rate"),
    ] {
        let output = std::process::Command::new(PATHLAB)
            .arg("capacity")
            .arg(&server.address)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains(message));
    }
    let unreachable = std::process::Command::new(PATHLAB)
        .args(["capacity", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("cannot reach a pathlab server"));
}
