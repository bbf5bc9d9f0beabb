//! PIE, RFC 8033: a proportional-integral controller of the queueing delay that drops (or
//! marks) arriving packets with a probability it updates every `tupdate`.
//!
//! The updates are periodic in virtual time: every call first runs each update whose
//! instant has passed, in order, so the result does not depend on when the link is called.
//! The queue delay is the sojourn time of the last packet dequeued (timestamps, as Linux
//! does by default), or the backlog over the departure rate measured as RFC 8033 section
//! 4.2 describes (`dq_rate_estimator`). The optional de-randomization of section 5.1 is not
//! implemented (Linux does not either).

use super::fifo::Fifo;
use super::{Limits, Queue};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::PieConfig;
use crate::time::{Duration, Instant};
use crate::verdict::{DropReason, Verdicts};

/// Mean packet size for the work-conserving safeguard and byte mode.
const MEAN_PACKET_BYTES: u64 = 1514;
/// Backlog at which a departure-rate measurement starts (RFC 8033: 16 KB).
const DQ_THRESHOLD_BYTES: u64 = 16 * 1024;
/// Above this drop probability PIE drops even ECN-capable packets (RFC 8033 section 5.1).
const MARK_ECN_THRESHOLD: f64 = 0.1;

/// A PIE queue.
#[derive(Debug)]
pub struct Pie {
    fifo: Fifo,
    config: PieConfig,
    limits: Limits,
    rng: Rng,
    drop_prob: f64,
    qdelay: Duration,
    qdelay_old: Duration,
    burst_allowance: Duration,
    next_update: Option<Instant>,
    /// Departure-rate estimation: cycle start, bytes counted, average rate in bytes/s.
    measuring: Option<(Instant, u64)>,
    avg_dq_rate: f64,
}

impl Pie {
    /// A PIE queue.
    pub fn new(config: PieConfig, limits: Limits, rng: Rng) -> Pie {
        Pie {
            fifo: Fifo::default(),
            config,
            limits,
            rng,
            drop_prob: 0.0,
            qdelay: Duration::ZERO,
            qdelay_old: Duration::ZERO,
            burst_allowance: config.max_burst,
            next_update: None,
            measuring: None,
            avg_dq_rate: 0.0,
        }
    }

    /// The current drop probability.
    pub fn drop_probability(&self) -> f64 {
        self.drop_prob
    }

    fn current_qdelay(&self) -> Duration {
        if self.fifo.len_bytes() == 0 {
            Duration::ZERO
        } else if self.config.dq_rate_estimator {
            if self.avg_dq_rate > 0.0 {
                Duration::from_secs_f64(self.fifo.len_bytes() as f64 / self.avg_dq_rate)
            } else {
                Duration::ZERO
            }
        } else {
            self.qdelay
        }
    }

    /// Runs every periodic update due by `now`.
    fn catch_up(&mut self, now: Instant) {
        let Some(mut next) = self.next_update else {
            self.next_update = Some(now + self.config.tupdate);
            return;
        };
        while next <= now {
            let idle = self.fifo.len_bytes() == 0
                && self.qdelay_old.is_zero()
                && self.drop_prob == 0.0
                && self.burst_allowance == self.config.max_burst;
            if idle {
                // Nothing changes while idle at rest: skip to the first update after now.
                let periods = (now - next).as_nanos() / self.config.tupdate.as_nanos() + 1;
                next += self.config.tupdate.saturating_mul(periods);
                break;
            }
            self.update();
            next += self.config.tupdate;
        }
        self.next_update = Some(next);
    }

    /// RFC 8033 section 4.2, `calculate_drop_prob`.
    fn update(&mut self) {
        let qdelay = self.current_qdelay();
        let target = self.config.target.as_secs_f64();
        let mut delta = self.config.alpha * (qdelay.as_secs_f64() - target)
            + self.config.beta * (qdelay.as_secs_f64() - self.qdelay_old.as_secs_f64());
        // Auto-tuning: small probabilities move in small steps.
        let scale = match self.drop_prob {
            p if p < 0.000_001 => 2048.0,
            p if p < 0.000_01 => 512.0,
            p if p < 0.000_1 => 128.0,
            p if p < 0.001 => 32.0,
            p if p < 0.01 => 8.0,
            p if p < 0.1 => 2.0,
            _ => 1.0,
        };
        delta /= scale;
        if self.drop_prob >= 0.1 && delta > 0.02 {
            delta = 0.02;
        }
        self.drop_prob += delta;
        if qdelay.is_zero() && self.qdelay_old.is_zero() {
            self.drop_prob *= 0.98;
            if self.drop_prob < 1e-12 {
                self.drop_prob = 0.0;
            }
        }
        self.drop_prob = self.drop_prob.clamp(0.0, 1.0);
        self.qdelay_old = qdelay;
        self.burst_allowance = self.burst_allowance.saturating_sub(self.config.tupdate);
        let half_target = self.config.target.as_nanos() / 2;
        if self.drop_prob == 0.0
            && qdelay.as_nanos() < half_target
            && self.qdelay_old.as_nanos() < half_target
        {
            self.burst_allowance = self.config.max_burst;
        }
    }

    /// RFC 8033 section 4.1, `drop_early`.
    fn drop_early(&mut self, len_bytes: u32) -> bool {
        let half_target = self.config.target.as_nanos() / 2;
        if !self.burst_allowance.is_zero()
            || (self.qdelay_old.as_nanos() < half_target && self.drop_prob < 0.2)
            || self.fifo.len_bytes() <= 2 * MEAN_PACKET_BYTES
        {
            return false;
        }
        let p = if self.config.bytemode {
            self.drop_prob * f64::from(len_bytes) / MEAN_PACKET_BYTES as f64
        } else {
            self.drop_prob
        };
        self.rng.chance(p)
    }
}

impl Queue for Pie {
    fn enqueue(&mut self, now: Instant, mut packet: Packet, verdicts: &mut Verdicts) {
        self.catch_up(now);
        if !self.limits.admits(
            self.fifo.len_packets(),
            self.fifo.len_bytes(),
            packet.len_bytes,
        ) {
            verdicts.drop_packet(packet, DropReason::QueueFull, now);
            return;
        }
        if self.drop_early(packet.len_bytes) {
            let ecn = self.config.ecn && self.drop_prob <= MARK_ECN_THRESHOLD;
            match verdicts.drop_or_mark(packet, DropReason::Pie, now, ecn) {
                Some(marked) => packet = marked,
                None => return,
            }
        }
        packet.enqueued = now;
        self.fifo.push(packet);
    }

    fn dequeue(&mut self, now: Instant, _verdicts: &mut Verdicts) -> Option<Packet> {
        self.catch_up(now);
        let packet = self.fifo.pop()?;
        self.qdelay = now.saturating_since(packet.enqueued);
        if self.config.dq_rate_estimator {
            if let Some((start, count)) = &mut self.measuring {
                *count += u64::from(packet.len_bytes);
                if *count >= DQ_THRESHOLD_BYTES {
                    let elapsed = now.saturating_since(*start).as_secs_f64();
                    if elapsed > 0.0 {
                        let rate = *count as f64 / elapsed;
                        self.avg_dq_rate = if self.avg_dq_rate == 0.0 {
                            rate
                        } else {
                            0.9 * self.avg_dq_rate + 0.1 * rate
                        };
                    }
                    self.measuring = None;
                }
            }
            if self.measuring.is_none() && self.fifo.len_bytes() >= DQ_THRESHOLD_BYTES {
                self.measuring = Some((now, 0));
            }
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
