//! A ping's round trip as the emulator recorded it: the truth a pinger's figure is judged
//! against (STYLE.md rule 19).

use std::time::Duration;

use pathlab_core::record::PacketRecord;
use pathlab_core::time::Instant;
use pathlab_probe::control::ReceivedProbe;
use pathlab_probe::owd::{delay_trend, DelayTrend};
use pathlab_results::recording::{Recording, RecordingLine};

use super::late::{ms, pinger_slack, Quantile};

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

    /// Time the request and its reply spent in the emulator as the wire saw it, from
    /// entering the link to being handed to the kernel (the model's time plus how late the
    /// emulator sent each), ns; `None` if either was dropped, never came or has no
    /// recorded send.
    pub fn on_wire_ns(&self) -> Option<u64> {
        let reply = self.reply.as_ref()?;
        let through = |r: &PacketRecord| Some((r.sent? - r.arrived).as_nanos());
        Some(through(&self.request)? + through(reply)?)
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
/// ping, ms.
pub const HOST_JITTER_MS: f64 = 1.0;

/// A ping as its pinger saw it.
#[derive(Debug, Clone, Copy)]
pub struct SeenPing {
    /// When it went, after the first ping (`None`: not known, as for a lost one).
    pub sent: Option<Duration>,
    /// Its round trip (`None`: no reply came).
    pub rtt: Option<Duration>,
    /// Whether the kernel's stamps timed `rtt` (free of the pinger's wake-ups), not the
    /// pinger's own clock readings around its system calls.
    pub by_kernel: bool,
}

/// Judges the round trips a pinger measured, one request every `interval` (`seen[n]`: the
/// n-th ping), against what the emulator recorded of the same packets (`recorded[n]`).
///
/// None is shorter than its two crossings' recorded time in the model, nor than their
/// time in the emulator as sent (each packet's `sent`: the model's time plus the
/// emulator's own lateness for that packet, so no bound on the lateness is needed). All
/// but 2 in 100 are within [`HOST_JITTER_MS`] of that sent time plus the hosts' own part
/// (the median of what is left over, which the recording does not hold). A round trip the
/// kernel timed holds none of the pinger's wake-ups; where any was timed in user space
/// (after `poll` returned), the pinger's own lateness against its send schedule at its
/// p99 is added (at most 10 ms: past that the test cannot judge, and fails saying so).
pub fn judge_round_trips(seen: &[SeenPing], recorded: &[RecordedPing], interval: Duration) {
    assert_eq!(seen.len(), recorded.len(), "one record per ping");
    let mut tolerance_ms = HOST_JITTER_MS;
    let by_user_space = seen
        .iter()
        .filter(|p| p.rtt.is_some() && !p.by_kernel)
        .count();
    if by_user_space > 0 {
        let sent: Vec<(usize, Duration)> = seen
            .iter()
            .enumerate()
            .filter_map(|(n, ping)| Some((n, ping.sent?)))
            .collect();
        eprintln!("{by_user_space} round trips timed in user space: the pinger's lateness counts");
        tolerance_ms += ms(pinger_slack(
            &sent,
            interval,
            Quantile::P99,
            Duration::from_millis(10),
        ));
    }
    // (ping, ms of its round trip beyond the emulator's sent time, ms the emulator was late)
    let mut left_over: Vec<(usize, f64, f64)> = Vec::new();
    for (n, (ping, record)) in seen.iter().zip(recorded).enumerate() {
        let (Some(rtt), Some(model_ns)) = (ping.rtt, record.in_link_ns()) else {
            continue;
        };
        let on_wire_ns = record
            .on_wire_ns()
            .unwrap_or_else(|| panic!("ping {n}: a forwarded packet without its send: {record:?}"));
        assert!(
            on_wire_ns >= model_ns,
            "ping {n}: sent before the model let it leave: {record:?}"
        );
        // The emulator's clock and the pinger's agree to microseconds.
        let host_ms = ms(rtt) - on_wire_ns as f64 / 1e6;
        assert!(
            ms(rtt) - model_ns as f64 / 1e6 > -0.05 && host_ms > -0.05,
            "ping {n} took {:.3} ms, less than its packets spent in the link ({:.3} ms in the \
             model, {:.3} ms as sent): {record:?}",
            ms(rtt),
            model_ns as f64 / 1e6,
            on_wire_ns as f64 / 1e6
        );
        left_over.push((n, host_ms, (on_wire_ns - model_ns) as f64 / 1e6));
    }
    assert!(!left_over.is_empty(), "no ping to judge");
    let mut sorted: Vec<f64> = left_over.iter().map(|&(_, x, _)| x).collect();
    sorted.sort_by(f64::total_cmp);
    let host_ms = sorted[sorted.len() / 2];
    let late_max = left_over
        .iter()
        .map(|&(_, _, late)| late)
        .fold(0.0, f64::max);
    let off: Vec<(usize, f64)> = left_over
        .iter()
        .filter(|&&(_, x, _)| x - host_ms > tolerance_ms)
        .map(|&(n, x, _)| (n, x))
        .collect();
    eprintln!(
        "{} round trips against the recording: the hosts' part {host_ms:.3} ms (largest {:.3}), \
         the emulator late by up to {late_max:.3} ms; {} more than {tolerance_ms:.3} ms beyond it",
        left_over.len(),
        sorted[sorted.len() - 1],
        off.len()
    );
    assert!(
        off.len() <= left_over.len() / 50,
        "{} of {} round trips beyond their sent time + {host_ms:.3} ms by more than \
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
