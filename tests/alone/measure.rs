//! The tests of `measure` that need the machine to themselves (see `alone.rs`).

use crate::util::LoopbackServer;
use crate::util::TestLock;
use pathlab_probe::control::Direction;
use pathlab_probe::owd::QueueVerdict;
use pathlab_probe_driver::Client;
use std::time::Duration;

use crate::measure::*;

#[test]
fn owd_up_and_down_over_loopback_see_every_probe_and_no_queue() {
    // Judges timing (no queue on loopback): alone, never beside a namespace test.
    let _lock = TestLock::exclusive();
    for ip in ["127.0.0.1", "[::1]"] {
        let server = LoopbackServer::start(generous(), None, ip);
        for direction in [Direction::Up, Direction::Down] {
            let client =
                Client::connect(&server.address, None, Duration::from_secs(5)).expect("connects");
            let result = client
                .one_way(direction, 5_000_000, 500, 2000, 100)
                .expect("test runs");
            assert_eq!(result.sequence.sent, 2000, "{ip} {direction:?}");
            assert_eq!(
                result.sequence.received, 2000,
                "{ip} {direction:?}: nothing is lost on loopback"
            );
            assert_eq!(
                (result.sequence.duplicates, result.sequence.reordered),
                (0, 0)
            );
            assert_eq!(
                result.owd.verdict,
                QueueVerdict::NotBuilding,
                "{ip} {direction:?}: {:?}",
                result.owd
            );
            assert_eq!(result.owd.series.len(), 2000);
        }
    }
}

#[test]
fn rtt_over_loopback_gets_every_reply_and_splits_with_agreeing_clocks() {
    // Judges timing (the clocks agree): alone, never beside a namespace test.
    let _lock = TestLock::exclusive();
    let server = LoopbackServer::start(
        generous(),
        Some(key("round trip key, 16 bytes")),
        "127.0.0.1",
    );
    let report = Client::connect(
        &server.address,
        Some(key("round trip key, 16 bytes")),
        Duration::from_secs(5),
    )
    .expect("connects")
    .round_trip(Duration::from_millis(2), 100, 300)
    .expect("round trips");
    assert_eq!(
        (report.sent, report.reflector_received, report.replies),
        (300, 300, 300)
    );
    assert_eq!(
        (report.lost_up, report.lost_down, report.duplicates),
        (0, 0, 0)
    );
    assert_eq!(
        report.offset_basis,
        pathlab_probe::rtt::OffsetBasis::ClocksAgree,
        "one machine, one clock"
    );
    assert!(report.rtt.min_ns <= report.rtt.p50_ns && report.rtt.p50_ns <= report.rtt.max_ns);
    assert_eq!(report.series.len(), 300);
}
