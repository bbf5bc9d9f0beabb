//! The two ends of a one-way test's probe stream, sans-IO: the sender's schedule and the
//! receiver's records, with the rule that ends the test (the sender's `Sent`, then a moment
//! for stragglers).

use std::net::IpAddr;

use pathlab_core::{Duration, Instant};

use super::{Rejections, Running, STRAGGLERS};
use crate::auth::Way;
use crate::control::{Message, ReceivedProbe, Schedule, RECORDS_PER_CHUNK};
use crate::owd::SendLateness;
use crate::probe::{Probe, ProbeError, ProbeKind, Reflection};

/// Sends a one-way test's probes on its schedule.
#[derive(Debug, Clone)]
pub struct ProbeSender {
    way: Way,
    schedule: Schedule,
    size: u32,
    count: u64,
    start: Instant,
    give_up: Instant,
    next: u64,
    last_sent: Instant,
    padding: Box<[u8; 4096]>,
    /// Each probe's lateness against its schedule, ns (three significant digits).
    lateness: hdrhistogram::Histogram<u64>,
}

impl ProbeSender {
    /// A sender of `count` probes of `size` bytes going `way` on `schedule`, starting at
    /// `now`; `padding` is a random block the probes' padding is cut from. A sender that
    /// cannot keep up stops when the test's time is over by half plus a second, and says
    /// how many it sent: the receiver counts loss against that.
    pub fn new(
        now: Instant,
        way: Way,
        schedule: Schedule,
        size: u32,
        count: u64,
        padding: Box<[u8; 4096]>,
    ) -> ProbeSender {
        let time = Duration::from_nanos(schedule.duration_ns(count));
        let give_up = now + Duration::from_nanos(time.as_nanos() / 2 * 3) + Duration::from_secs(1);
        ProbeSender {
            way,
            schedule,
            size,
            count,
            start: now,
            give_up,
            next: 0,
            last_sent: now,
            padding,
            lateness: hdrhistogram::Histogram::new_with_bounds(1, SendLateness::MAX_NS, 3)
                .expect("valid bounds"),
        }
    }

    /// When the next probe is due (`None`: all sent, or given up).
    pub fn poll_at(&self) -> Option<Instant> {
        (self.next < self.count)
            .then(|| self.start + Duration::from_nanos(self.schedule.due_ns(self.next) as u64))
    }

    /// Writes the next probe into `out` if it is due at `now`, stamped `stamp_ns` (the
    /// sender's clock in probe timestamps); returns its sequence number.
    pub fn poll_probe(
        &mut self,
        now: Instant,
        stamp_ns: u64,
        running: &Running,
        out: &mut Vec<u8>,
    ) -> Result<Option<u64>, ProbeError> {
        let due = match self.poll_at() {
            Some(due) if due <= now => due,
            _ => return Ok(None),
        };
        if now > self.give_up {
            self.count = self.next;
            return Ok(None);
        }
        let seq = self.next;
        let padding = &self.padding;
        running.encode_probe(
            self.way,
            &Probe {
                kind: ProbeKind::OneWay,
                session: running.session,
                seq,
                sent_ns: stamp_ns,
                reflection: Reflection::default(),
            },
            self.size as usize,
            &mut |pad| fill_padding(pad, padding, seq),
            out,
        )?;
        self.next += 1;
        self.last_sent = now;
        self.lateness
            .saturating_record(now.saturating_since(due).as_nanos());
        Ok(Some(seq))
    }

    /// The `Sent` message once every probe is out (or the sender gave up).
    pub fn sent(&self) -> Option<Message> {
        (self.next >= self.count).then(|| Message::Sent {
            count: self.next,
            duration_ns: self.last_sent.saturating_since(self.start).as_nanos(),
            late: self.lateness(),
        })
    }

    /// How late the probes sent so far were against their schedule.
    pub fn lateness(&self) -> SendLateness {
        if self.lateness.is_empty() {
            return SendLateness::default();
        }
        SendLateness {
            p50_ns: self.lateness.value_at_quantile(0.5),
            p99_ns: self.lateness.value_at_quantile(0.99),
            max_ns: self.lateness.max(),
        }
    }
}

/// Random-looking padding without a random call per probe: a window into a random block.
pub fn fill_padding(pad: &mut [u8], random: &[u8; 4096], seq: u64) {
    let offset = (seq as usize * 131) % random.len();
    for (i, byte) in pad.iter_mut().enumerate() {
        *byte = random[(offset + i) % random.len()];
    }
}

/// Records a one-way test's probes as they arrive: each sequence number of the test once,
/// in arrival order. Copies of one already recorded are counted, not kept, and sequence
/// numbers past the test's count are not the test's: whatever a sender sends, the records
/// are at most the count it asked for.
#[derive(Debug, Clone)]
pub struct ProbeReceiver {
    way: Way,
    size: u32,
    count: u64,
    seen: Vec<u64>,
    arrivals: Vec<ReceivedProbe>,
    duplicates: u64,
    sent: Option<(u64, u64, SendLateness)>,
    finish_at: Option<Instant>,
}

/// What a receiver recorded, once the test is over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// Each accepted probe's first arrival, in arrival order.
    pub arrivals: Vec<ReceivedProbe>,
    /// Copies of probes already recorded.
    pub duplicates: u64,
    /// Probes the sender says it sent.
    pub sent: u64,
    /// From the sender's first probe to its last, ns.
    pub duration_ns: u64,
    /// How late the sender says it sent them.
    pub late: SendLateness,
}

impl ProbeReceiver {
    /// A receiver of `count` probes of `size` bytes going `way` (the request's, bounded by
    /// [`super::check_limits`] before a server accepts it).
    pub fn new(way: Way, size: u32, count: u64) -> ProbeReceiver {
        ProbeReceiver {
            way,
            size,
            count,
            seen: vec![0; count.div_ceil(64) as usize],
            arrivals: Vec::with_capacity(count.min(10_000_000) as usize),
            duplicates: 0,
            sent: None,
            finish_at: None,
        }
    }

    /// A datagram arrived from `source` at `received_ns` (the receiver's clock; the
    /// kernel's receive time where there is one); `truncated` if it was longer than the
    /// buffer. Returns whether it is one of the test's probes.
    pub fn handle_probe(
        &mut self,
        received_ns: u64,
        source: IpAddr,
        data: &[u8],
        truncated: bool,
        running: &Running,
        rejections: &mut Rejections,
    ) -> bool {
        if truncated || data.len() != self.probe_len(running) {
            rejections.probes += 1;
            return false;
        }
        match running.accept_probe(self.way, ProbeKind::OneWay, source, data, rejections) {
            Some(probe) if probe.seq >= self.count => {
                rejections.probes += 1;
                false
            }
            Some(probe) => {
                let (word, bit) = ((probe.seq / 64) as usize, 1u64 << (probe.seq % 64));
                if self.seen[word] & bit != 0 {
                    self.duplicates += 1;
                    return true;
                }
                self.seen[word] |= bit;
                self.arrivals.push(ReceivedProbe {
                    seq: probe.seq,
                    sent_ns: probe.sent_ns,
                    received_ns,
                });
                true
            }
            None => false,
        }
    }

    /// The sender's `Sent` arrived at `now`: the test ends a moment later.
    pub fn handle_sent(&mut self, now: Instant, count: u64, duration_ns: u64, late: SendLateness) {
        if self.sent.is_none() {
            self.sent = Some((count, duration_ns, late.bounded()));
            self.finish_at = Some(now + STRAGGLERS);
        }
    }

    /// When the test is over for the receiver (after `Sent`).
    pub fn poll_at(&self) -> Option<Instant> {
        self.finish_at
    }

    /// Whether the test is over at `now`.
    pub fn is_finished(&self, now: Instant) -> bool {
        self.finish_at.is_some_and(|at| now >= at)
    }

    /// How long the test's probes are on the wire: the asked size, or the least a probe
    /// takes (a keyed one carries its tag).
    pub fn probe_len(&self, running: &Running) -> usize {
        running.probe_len(self.way, ProbeKind::OneWay, self.size)
    }

    /// The size of the test's probes, bytes.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Probes accepted so far, copies included (a sign the sender is alive).
    pub fn received(&self) -> u64 {
        self.arrivals.len() as u64 + self.duplicates
    }

    /// What it recorded, and the messages that report it to the sender (`Received` in
    /// chunks, then `Done` with `rejected`).
    pub fn finish(self, rejected: u64) -> (Received, Vec<Message>) {
        let mut messages: Vec<Message> = self
            .arrivals
            .chunks(RECORDS_PER_CHUNK)
            .map(|chunk| Message::Received {
                probes: chunk.to_vec(),
            })
            .collect();
        messages.push(Message::Done {
            received: self.arrivals.len() as u64,
            rejected,
            duplicates: self.duplicates,
            excess: 0,
        });
        let (sent, duration_ns, late) = self.sent.unwrap_or_default();
        (
            Received {
                arrivals: self.arrivals,
                duplicates: self.duplicates,
                sent,
                duration_ns,
                late,
            },
            messages,
        )
    }
}

/// Holds a reflector to what its test asked for: at most the test's count of requests,
/// at its rate (one per interval, with a second's worth of burst for a path that bunches
/// them). What comes faster or beyond is dropped unanswered and counted: a client cannot
/// make a server reflect more than the test it was granted, at any rate, for its whole time.
#[derive(Debug, Clone)]
pub struct Reflector {
    interval: Duration,
    burst: u64,
    left: u64,
    tokens: u64,
    refilled: Instant,
    excess: u64,
}

impl Reflector {
    /// A reflector of `count` requests, one per `interval`, starting at `now`.
    pub fn new(now: Instant, count: u64, interval: Duration) -> Reflector {
        let interval = interval.max(Duration::from_nanos(1));
        let burst =
            (Duration::from_secs(1).as_nanos() / interval.as_nanos()).clamp(1, count.max(1));
        Reflector {
            interval,
            burst,
            left: count,
            tokens: burst,
            refilled: now,
            excess: 0,
        }
    }

    /// Whether a request arrived at `now` may be reflected (counted as excess if not).
    pub fn admit(&mut self, now: Instant) -> bool {
        let earned = now.saturating_since(self.refilled).as_nanos() / self.interval.as_nanos();
        if earned > 0 {
            self.tokens = self.tokens.saturating_add(earned).min(self.burst);
            self.refilled += Duration::from_nanos(earned * self.interval.as_nanos());
        }
        if self.left == 0 || self.tokens == 0 {
            self.excess += 1;
            return false;
        }
        self.left -= 1;
        self.tokens -= 1;
        true
    }

    /// Requests dropped so far.
    pub fn excess(&self) -> u64 {
        self.excess
    }
}
