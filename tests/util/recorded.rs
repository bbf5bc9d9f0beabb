//! A ping's round trip as the emulator recorded it: the truth a pinger's figure is judged
//! against (STYLE.md rule 19).

use std::time::Duration;

use pathlab_core::record::PacketRecord;
use pathlab_core::time::Instant;
use pathlab_probe::control::ReceivedProbe;
use pathlab_probe::owd::{delay_trend, DelayTrend};
use pathlab_results::recording::{Recording, RecordingLine};

use super::late::{ms, pinger_slack, Lateness, Quantile};

/// ICMP echo frames with a 56-byte payload: 14 Ethernet + 20 IPv4 + 8 ICMP + 56.
pub const ECHO_FRAME: u32 = 98;

/// One echo request and its reply as they crossed the emulator.
#[derive(Debug, Clone)]
pub struct RecordedPing {
    /// The request (towards the pinged host).
    pub request: PacketRecord,
    /// Its reply, if the request got through and a reply came back through the link.
    pub reply: Option<PacketRecord>,
}

impl RecordedPing {
    /// Time the request and its reply spent in the link (model time: queue, transmission,
    /// delay), ns; `None` if either was dropped or never came.
    pub fn in_link_ns(&self) -> Option<u64> {
        let reply = self.reply.as_ref()?;
        Some(in_link_ns(&self.request)? + in_link_ns(reply)?)
    }
}

/// How long `record` spent in the link, ns; `None` if it was dropped.
pub fn in_link_ns(record: &PacketRecord) -> Option<u64> {
    Some((record.departed? - record.arrived).as_nanos())
}

/// The round trips of the echo frames of `frame_bytes` that crossed in direction `out`
/// and back in the other, in the order the requests entered the link (one per ping sent
/// through it, so the n-th is the n-th request of the pings that crossed).
///
/// A reply comes back in the order of the requests it answers: replies are paired with
/// the delivered requests one by one. This holds while nothing reorders the way back (a
/// spec without jitter or reordering, delays that only grow).
pub fn recorded_pings(recording: &Recording, frame_bytes: u32, out: u8) -> Vec<RecordedPing> {
    let back = 1 - out;
    let in_order = |dir: u8| {
        let mut records: Vec<PacketRecord> = recording
            .packets(dir)
            .filter(|r| r.len_bytes == frame_bytes && r.duplicate_of.is_none())
            .cloned()
            .collect();
        // The recording writes a packet once its fate is known: a drop on arrival comes
        // before packets still in the queue. The link's ids are the arrival order.
        records.sort_by_key(|r| r.id);
        records
    };
    let mut replies = in_order(back).into_iter();
    in_order(out)
        .into_iter()
        .map(|request| {
            let reply = request.departed.and_then(|_| replies.next());
            RecordedPing { request, reply }
        })
        .collect()
}

/// The trend test `owd` runs ([`delay_trend`], windows of `window` packets), run on what
/// the link recorded of the frames of `frame_bytes` in direction `dir`: each frame's entry
/// into the link taken as its sending, its exit as its arrival, in model time. It is the
/// verdict a probe through that link must reach when the link holds the path's only queue,
/// whatever the sender did (a sender late on a busy machine that catches up in bursts
/// builds a real queue, and the recording has it).
pub fn recorded_delay_trend(
    recording: &Recording,
    dir: u8,
    frame_bytes: u32,
    window: usize,
) -> DelayTrend {
    let mut probes: Vec<ReceivedProbe> = recording
        .packets(dir)
        .filter(|r| r.len_bytes == frame_bytes && r.duplicate_of.is_none())
        .filter_map(|r| {
            Some(ReceivedProbe {
                seq: r.id,
                sent_ns: r.arrived.as_nanos(),
                received_ns: r.departed?.as_nanos(),
            })
        })
        .collect();
    probes.sort_by_key(|p| p.received_ns);
    delay_trend(&probes, window)
}

/// The instants direction `dir`'s spec changed (`emulate set`, a lab's change over HTTP),
/// with the new spec, in order.
pub fn spec_changes(recording: &Recording, dir: u8) -> Vec<(Instant, String)> {
    recording
        .lines
        .iter()
        .filter_map(|line| match line {
            RecordingLine::Spec { dir: d, at, spec } if *d == dir => Some((*at, spec.clone())),
            _ => None,
        })
        .collect()
}

/// How much the hosts' own part of a ping's round trip (their stacks) may vary from ping to
/// ping, beyond the emulator's lateness and the pinger's own, ms.
pub const HOST_JITTER_MS: f64 = 1.0;

/// A ping as its pinger saw it.
#[derive(Debug, Clone, Copy)]
pub struct SeenPing {
    /// When it went, after the first ping (`None`: not known, as for a lost one).
    pub sent: Option<Duration>,
    /// Its round trip (`None`: no reply came).
    pub rtt: Option<Duration>,
}

/// Judges the round trips a pinger measured, one request every `interval` (`seen[n]`: the
/// n-th ping), against what the emulator recorded of the same packets (`recorded[n]`).
///
/// None is shorter than its two crossings' recorded time (the model is the floor). All but
/// 2 in 100 are within a tolerance of that time plus the hosts' own part (the median of
/// what is left over, which the recording does not hold): [`HOST_JITTER_MS`], the
/// emulator's lateness at its p99 for each crossing (`lateness`, at most 5 ms), and the
/// pinger's own wake-ups at their p99 (it stamps replies after `poll` returns: its
/// lateness against its send schedule, at most 10 ms). Past those the test cannot judge,
/// and fails saying so.
pub fn judge_round_trips(
    seen: &[SeenPing],
    recorded: &[RecordedPing],
    lateness: &Lateness,
    interval: Duration,
) {
    assert_eq!(seen.len(), recorded.len(), "one record per ping");
    let sent: Vec<(usize, Duration)> = seen
        .iter()
        .enumerate()
        .filter_map(|(n, ping)| Some((n, ping.sent?)))
        .collect();
    let tolerance_ms = HOST_JITTER_MS
        + ms(lateness.slack(Quantile::P99, &[0, 1], Duration::from_millis(5)))
        + ms(pinger_slack(
            &sent,
            interval,
            Quantile::P99,
            Duration::from_millis(10),
        ));
    let left_over: Vec<(usize, f64)> = seen
        .iter()
        .zip(recorded)
        .enumerate()
        .filter_map(|(n, (ping, record))| {
            Some((n, ms(ping.rtt?) - record.in_link_ns()? as f64 / 1e6))
        })
        .collect();
    assert!(!left_over.is_empty(), "no ping to judge");
    for &(n, host_ms) in &left_over {
        // The emulator's clock and the pinger's agree to microseconds.
        assert!(
            host_ms > -0.05,
            "ping {n} took {host_ms:.3} ms less than its packets spent in the link: {:?}",
            recorded[n]
        );
    }
    let mut sorted: Vec<f64> = left_over.iter().map(|&(_, x)| x).collect();
    sorted.sort_by(f64::total_cmp);
    let host_ms = sorted[sorted.len() / 2];
    let off: Vec<(usize, f64)> = left_over
        .iter()
        .copied()
        .filter(|&(_, x)| x - host_ms > tolerance_ms)
        .collect();
    eprintln!(
        "{} round trips against the recording: the hosts' part {host_ms:.3} ms (largest {:.3}); \
         {} more than {tolerance_ms:.3} ms beyond it",
        left_over.len(),
        sorted[sorted.len() - 1],
        off.len()
    );
    assert!(
        off.len() <= left_over.len() / 50,
        "{} of {} round trips beyond their recorded time + {host_ms:.3} ms by more than \
         {tolerance_ms:.3} ms (ping, ms left over): {off:.3?}",
        off.len(),
        left_over.len()
    );
}

/// Judges a change of a delay-only link from `old_ms` to `new_ms` each way (`emulate set`,
/// a lab's change over HTTP) on the recording, exactly, in model time: it is recorded
/// once per direction, and from that instant every packet takes `new_ms`, every packet
/// that entered before still `old_ms`. Returns the instant of each direction's change, ns
/// of the emulator's clock.
pub fn assert_delay_changed(recording: &Recording, old_ms: u64, new_ms: u64) -> [u64; 2] {
    let mut changed_at = [0; 2];
    for dir in 0..2u8 {
        let changes = spec_changes(recording, dir);
        assert_eq!(
            changes.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>(),
            [format!("delay {new_ms}ms")],
            "direction {dir}: the one change recorded"
        );
        let at = changes[0].0.as_nanos();
        for record in recording.packets(dir) {
            assert_eq!(record.dropped, None, "a delay drops nothing");
            let Some(in_link) = in_link_ns(record) else {
                continue; // still inside when the emulator stopped
            };
            let spec_ms = if record.arrived.as_nanos() < at {
                old_ms
            } else {
                new_ms
            };
            assert_eq!(
                in_link,
                spec_ms * 1_000_000,
                "direction {dir}, the change at {at} ns: {record:?}"
            );
        }
        changed_at[usize::from(dir)] = at;
    }
    changed_at
}
