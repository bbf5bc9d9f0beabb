//! The two ends of a one-way test's probe stream, sans-IO: the sender's schedule and the
//! receiver's records, with the rule that ends the test (the sender's `Sent`, then a moment
//! for stragglers).

use std::net::IpAddr;

use pathlab_core::{Duration, Instant};

use super::{Rejections, Running, STRAGGLERS};
use crate::auth::Way;
use crate::control::{Message, ReceivedProbe, Schedule, RECORDS_PER_CHUNK};
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
        match self.poll_at() {
            Some(due) if due <= now => {}
            _ => return Ok(None),
        }
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
        Ok(Some(seq))
    }

    /// The `Sent` message once every probe is out (or the sender gave up).
    pub fn sent(&self) -> Option<Message> {
        (self.next >= self.count).then(|| Message::Sent {
            count: self.next,
            duration_ns: self.last_sent.saturating_since(self.start).as_nanos(),
        })
    }
}

/// Random-looking padding without a random call per probe: a window into a random block.
pub fn fill_padding(pad: &mut [u8], random: &[u8; 4096], seq: u64) {
    let offset = (seq as usize * 131) % random.len();
    for (i, byte) in pad.iter_mut().enumerate() {
        *byte = random[(offset + i) % random.len()];
    }
}

/// Records a one-way test's probes as they arrive.
#[derive(Debug, Clone)]
pub struct ProbeReceiver {
    way: Way,
    size: u32,
    arrivals: Vec<ReceivedProbe>,
    sent: Option<(u64, u64)>,
    finish_at: Option<Instant>,
}

/// What a receiver recorded, once the test is over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// Every accepted probe in arrival order (duplicates included).
    pub arrivals: Vec<ReceivedProbe>,
    /// Probes the sender says it sent.
    pub sent: u64,
    /// From the sender's first probe to its last, ns.
    pub duration_ns: u64,
}

impl ProbeReceiver {
    /// A receiver of probes of `size` bytes going `way`; room for `count` of them.
    pub fn new(way: Way, size: u32, count: u64) -> ProbeReceiver {
        ProbeReceiver {
            way,
            size,
            arrivals: Vec::with_capacity(count.min(10_000_000) as usize),
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
        if truncated || data.len() != self.size as usize {
            rejections.probes += 1;
            return false;
        }
        match running.accept_probe(self.way, ProbeKind::OneWay, source, data, rejections) {
            Some(probe) => {
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
    pub fn handle_sent(&mut self, now: Instant, count: u64, duration_ns: u64) {
        if self.sent.is_none() {
            self.sent = Some((count, duration_ns));
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

    /// The size of the test's probes, bytes.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Probes accepted so far.
    pub fn received(&self) -> u64 {
        self.arrivals.len() as u64
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
        });
        let (sent, duration_ns) = self.sent.unwrap_or_default();
        (
            Received {
                arrivals: self.arrivals,
                sent,
                duration_ns,
            },
            messages,
        )
    }
}
