//! Random Early Detection (Floyd and Jacobson 1993), with tc-red(8)'s options.
//!
//! On each arrival the average backlog (bytes) moves toward the current backlog by the
//! EWMA weight; after an idle period it first decays as if `avpkt`-sized packets had been
//! sent at 10 Mbit/s (tc's default `bandwidth`), since the queue does not know its line
//! rate. Between `min` and `max` the drop probability rises linearly to `probability`
//! (and, with `gentle`, on to 1 at 2 x max); the paper's count correction spaces drops
//! evenly. Above the curve every packet is dropped (or marked, with `ecn` unless
//! `harddrop`).

use super::fifo::Fifo;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::RedConfig;
use crate::time::Instant;
use crate::verdict::{DropReason, Verdicts};

/// Line rate assumed to age the average over idle time (tc-red's default `bandwidth`).
const IDLE_BANDWIDTH_BITS_PER_SEC: f64 = 10e6;

/// RED's drop probability for an average backlog, before the count correction:
/// 0 below min, linear to `max_probability` at max, then 1 (or, with gentle, linear from
/// `max_probability` to 1 between max and 2 x max).
pub fn drop_curve(config: &RedConfig, average_bytes: f64) -> f64 {
    let (min, max) = (config.min_bytes as f64, config.max_bytes as f64);
    let max_p = config.max_probability.get();
    if average_bytes < min {
        0.0
    } else if average_bytes < max {
        max_p * (average_bytes - min) / (max - min)
    } else if config.gentle && average_bytes < 2.0 * max {
        max_p + (1.0 - max_p) * (average_bytes - max) / max
    } else {
        1.0
    }
}

/// A RED queue.
#[derive(Debug)]
pub struct Red {
    fifo: Fifo,
    config: RedConfig,
    limits: Limits,
    rng: Rng,
    average: f64,
    /// Packets since the last drop while in the probabilistic region (-1: outside it).
    count: i64,
    idle_since: Option<Instant>,
}

impl Red {
    /// A RED queue.
    pub fn new(config: RedConfig, limits: Limits, rng: Rng) -> Red {
        Red {
            fifo: Fifo::default(),
            config,
            limits,
            rng,
            average: 0.0,
            count: -1,
            idle_since: Some(Instant::ZERO),
        }
    }

    /// The current average backlog in bytes.
    pub fn average_bytes(&self) -> f64 {
        self.average
    }
}

impl Queue for Red {
    fn enqueue(&mut self, now: Instant, mut packet: Packet, verdicts: &mut Verdicts) {
        let weight = self.config.weight;
        if let Some(since) = self.idle_since.take() {
            let packet_time =
                f64::from(self.config.avpkt_bytes) * 8.0 / IDLE_BANDWIDTH_BITS_PER_SEC;
            let idle_packets = now.saturating_since(since).as_secs_f64() / packet_time;
            self.average *= (1.0 - weight).powf(idle_packets);
        }
        self.average = (1.0 - weight) * self.average + weight * self.fifo.len_bytes() as f64;

        let probability = drop_curve(&self.config, self.average);
        let early = if probability <= 0.0 {
            self.count = -1;
            false
        } else if probability < 1.0 {
            self.count += 1;
            let denominator = 1.0 - self.count as f64 * probability;
            let p = if denominator <= 0.0 {
                1.0
            } else {
                probability / denominator
            };
            self.rng.chance(p)
        } else {
            true
        };
        if early {
            self.count = 0;
            let may_mark = self.config.ecn && !(self.config.harddrop && probability >= 1.0);
            match verdicts.drop_or_mark(packet, DropReason::Red, now, may_mark) {
                Some(marked) => packet = marked,
                None => {
                    if self.fifo.len_bytes() == 0 {
                        self.idle_since = Some(now);
                    }
                    return;
                }
            }
        }
        self.fifo.offer(now, packet, self.limits, verdicts);
    }

    fn dequeue(&mut self, now: Instant, _verdicts: &mut Verdicts) -> Option<Packet> {
        let packet = self.fifo.pop()?;
        if self.fifo.len_bytes() == 0 {
            self.idle_since = Some(now);
        }
        Some(packet)
    }

    fn len_packets(&self) -> usize {
        self.fifo.len_packets()
    }

    fn len_bytes(&self) -> u64 {
        self.fifo.len_bytes()
    }

    fn drain(&mut self) -> Vec<Packet> {
        self.fifo.drain_all()
    }
}
