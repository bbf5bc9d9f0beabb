//! The tests of `inspect` that need the machine to themselves (see `alone.rs`).

use crate::util::emulated::{privileged, Lab};
use crate::util::late::{Lateness, Quantile};
use pathlab_diagnose::diagnosis::Limit;
use std::time::Duration;

use crate::inspect::*;

#[test]
fn the_retransmissions_it_reports_are_the_segments_the_emulator_dropped() {
    let Some(_serial) = privileged("inspect_retransmissions") else {
        return;
    };
    // Cubic (not the machine's bbr, which does not slow down for random loss) through a
    // 50 Mbit/s line losing 1%: the losses hold it far below the rate.
    let mut lab = Lab::start_with(
        "inspect-loss",
        "rate 50mbit delay 10ms loss 1%",
        &["--reverse", "delay 10ms", "--seed", "11"],
        true,
        true,
    );
    let watched = watch(
        &lab,
        5304,
        Writes::Bulk(Duration::from_secs(3)),
        Buffers {
            congestion: Some("cubic"),
            ..Buffers::default()
        },
        LastLook::AfterDrain,
        &[],
    );
    let (stats, recording) = lab.stop();
    // Every frame the kernel handed the emulator reached the model (no `ring_full`: a
    // frame lost there is resent but not in the recording), and round trips were rarely
    // late by more than half the 20 ms round trip itself (both directions' p99): later,
    // TCP's timers (a loss probe after two round trips) may resend what was not lost.
    Lateness::of_stats(&stats).judgeable(Quantile::P99, &[0, 1], Duration::from_millis(10));
    let connection = watched.sender(5304);
    let retrans = connection.last.info.expect("tcp_info").total_retrans;
    // The bulk connection's data segments: its flow carried the most frames (another
    // frame the line dropped, of another flow, was never this sender's to resend).
    let mut per_flow = std::collections::HashMap::<u64, (u32, u32)>::new();
    for r in recording.packets(0).filter(|r| r.len_bytes > 100) {
        let (frames, drops) = per_flow.entry(r.flow).or_default();
        *frames += 1;
        *drops += u32::from(r.dropped.is_some());
    }
    let dropped = per_flow
        .values()
        .max_by_key(|(frames, _)| *frames)
        .map_or(0, |(_, drops)| *drops);
    eprintln!(
        "{}\n  inspect: {retrans} segments retransmitted; the emulator dropped {dropped} of its \
         data segments (frames and drops per flow over 100 bytes: {:?})",
        connection.verdict.sentence,
        per_flow.values().collect::<Vec<_>>()
    );
    assert!(dropped >= 10, "1% of thousands of segments: {dropped}");
    // Against the recording: every dropped segment is sent again, and the sender drained
    // before inspect's last look, so that look counted every resend; tail-loss probes and
    // timeouts may resend a few that were not lost: 10% and 2 on top.
    assert!(
        retrans >= dropped && f64::from(retrans) <= f64::from(dropped) * 1.1 + 2.0,
        "inspect's {retrans} retransmissions against the emulator's {dropped} drops"
    );
    assert_eq!(
        connection.verdict.limit,
        Limit::Congestion,
        "{}",
        connection.verdict.sentence
    );
    assert!(
        connection
            .verdict
            .sentence
            .contains("the path loses packets"),
        "{}",
        connection.verdict.sentence
    );
}
