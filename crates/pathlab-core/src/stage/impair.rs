//! Instant impairments: duplication and corruption, and the correlated coin they flip.
//!
//! # The correlated coin
//!
//! netem's `P [CORR]` draws `next = (1 - c) * random + c * last` and compares it with `P`,
//! which pulls the long-run rate towards 50% as the correlation grows (with `loss 1% 50%`
//! the loss rate is not 1%). [`CorrelatedChance`] is instead a two-state Markov chain
//! with
//!
//! - `P(event | previous event) = c + (1 - c) p`,
//! - `P(event | no previous event) = (1 - c) p`,
//!
//! whose stationary probability is exactly `p` and whose lag-1 correlation is exactly
//! `c`: events come in runs of mean length `1 / ((1 - c)(1 - p))`, and the long-run rate
//! is what the user asked for. The first decision is drawn with probability `p` (the
//! chain starts stationary). `c = 1` repeats the first decision forever.
//!
//! # Stages
//!
//! [`Duplicate`] and [`Corrupt`] act at the instant a packet arrives: `dequeue(now)` gives
//! packets back at the `now` they were enqueued with, and `poll_at` is that instant.
//! A duplicate follows its original immediately, with the same bytes and fields (the link
//! gives it its own `id`). Corruption flips one uniformly chosen bit at or after the IP
//! header (anywhere in `data` if no IP header was parsed; a synthetic packet without bytes
//! is only flagged), and sets `corrupted`.

use super::{Outbox, Stage};
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::Chance;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// A biased coin whose successive outcomes are correlated but whose long-run rate is the
/// configured probability.
#[derive(Debug, Clone)]
pub struct CorrelatedChance {
    probability: f64,
    correlation: f64,
    /// `P(event | previous event)`.
    after_event: f64,
    /// `P(event | no previous event)`.
    after_no_event: f64,
    last: bool,
    rng: Rng,
}

impl CorrelatedChance {
    /// A coin for `chance`.
    pub fn new(chance: Chance, mut rng: Rng) -> CorrelatedChance {
        let probability = chance.probability.get();
        let correlation = chance.correlation.get();
        let last = rng.chance(probability);
        CorrelatedChance {
            probability,
            correlation,
            after_event: correlation + (1.0 - correlation) * probability,
            after_no_event: (1.0 - correlation) * probability,
            // The first flip conditions on a stationary "previous" outcome, so the first
            // flip is itself stationary.
            last,
            rng,
        }
    }

    /// The long-run probability of the event.
    pub fn probability(&self) -> f64 {
        self.probability
    }

    /// Flips the coin.
    #[inline]
    pub fn flip(&mut self) -> bool {
        if self.correlation == 0.0 {
            return self.rng.chance(self.probability);
        }
        let p = if self.last {
            self.after_event
        } else {
            self.after_no_event
        };
        self.last = self.rng.chance(p);
        self.last
    }
}

/// Duplicates packets: each arriving packet is followed, with the configured (correlated)
/// probability, by one copy.
#[derive(Debug)]
pub struct Duplicate {
    coin: CorrelatedChance,
    out: Outbox,
    /// Packets duplicated so far.
    pub duplicated: u64,
}

impl Duplicate {
    /// A duplication stage.
    pub fn new(chance: Chance, rng: Rng) -> Duplicate {
        Duplicate {
            coin: CorrelatedChance::new(chance, rng),
            out: Outbox::default(),
            duplicated: 0,
        }
    }
}

impl Stage for Duplicate {
    fn enqueue(&mut self, now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        if self.coin.flip() {
            self.duplicated += 1;
            let copy = packet.clone();
            self.out.push(now, packet);
            self.out.push(now, copy);
        } else {
            self.out.push(now, packet);
        }
    }
    passes_through_outbox!(out);
}

/// Flips one random bit of packets.
#[derive(Debug)]
pub struct Corrupt {
    coin: CorrelatedChance,
    rng: Rng,
    out: Outbox,
    /// Packets corrupted so far.
    pub corrupted: u64,
}

impl Corrupt {
    /// A corruption stage.
    pub fn new(chance: Chance, mut rng: Rng) -> Corrupt {
        Corrupt {
            coin: CorrelatedChance::new(chance, rng.fork()),
            rng,
            out: Outbox::default(),
            corrupted: 0,
        }
    }

    /// Flips one uniformly chosen bit at or after the IP header (anywhere if there is no
    /// parsed IP header) and flags the packet.
    pub fn corrupt(packet: &mut Packet, rng: &mut Rng) {
        let len = packet.data.len();
        if len > 0 {
            let start = packet
                .ip_offset()
                .filter(|&offset| offset < len)
                .unwrap_or(0);
            let byte = start + rng.below((len - start) as u64) as usize;
            let bit = rng.below(8);
            packet.data[byte] ^= 1 << bit;
        }
        packet.corrupted = true;
    }
}

impl Stage for Corrupt {
    fn enqueue(&mut self, now: Instant, mut packet: Packet, _verdicts: &mut Verdicts) {
        if self.coin.flip() {
            self.corrupted += 1;
            Corrupt::corrupt(&mut packet, &mut self.rng);
        }
        self.out.push(now, packet);
    }
    passes_through_outbox!(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::stage::testutil::{binomial_bound, check_correlated_count};
    use crate::units::Probability;

    fn chance(p: f64, c: f64) -> Chance {
        Chance {
            probability: Probability::new(p).unwrap(),
            correlation: Probability::new(c).unwrap(),
        }
    }

    #[test]
    fn correlated_coin_keeps_the_rate_and_has_lag1_correlation_c() {
        let n = 1_000_000;
        for (p, c) in [(0.1, 0.0), (0.1, 0.5), (0.02, 0.8), (0.5, 0.3)] {
            let mut coin = CorrelatedChance::new(chance(p, c), Rng::seed_from(21));
            let events: Vec<bool> = (0..n).map(|_| coin.flip()).collect();
            let (k, np, rho) = check_correlated_count(&events, p, c);
            eprintln!("coin p={p} c={c}: {k} of {n} (expected {np}), lag-1 {rho:.4}");
            assert!((rho - c).abs() < 0.01, "p={p} c={c}: lag-1 {rho}");
        }
    }

    #[test]
    fn duplicate_rate_is_binomial_and_copies_follow_originals() {
        let n = 100_000u32;
        let p = 0.05;
        let mut stage = Duplicate::new(chance(p, 0.0), Rng::seed_from(3));
        let mut verdicts = Verdicts::default();
        let mut out = Vec::new();
        for i in 0..n {
            let now = Instant::from_micros(u64::from(i));
            let mut packet = Packet::synthetic(now, 100, 0, Ecn::NotEct);
            packet.tag = i;
            stage.enqueue(now, packet, &mut verdicts);
            assert_eq!(stage.poll_at(), Some(now));
            while let Some(packet) = stage.dequeue(now) {
                out.push(packet.tag);
            }
        }
        let k = stage.duplicated as f64;
        let np = f64::from(n) * p;
        eprintln!("duplicate: {k} of {n} (expected {np})");
        let bound = binomial_bound(n as f64, p, 0.0);
        assert!((k - np).abs() <= bound, "{k} vs {np} +- {bound}");
        assert_eq!(out.len() as u64, u64::from(n) + stage.duplicated);
        assert!(out.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1));
        assert!(verdicts.dropped.is_empty());
    }

    #[test]
    fn corrupt_flips_exactly_one_bit_after_the_ip_header() {
        let mut rng = Rng::seed_from(8);
        let mut frame = vec![0u8; 14 + 20 + 40];
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        frame[14] = 0x45;
        let original = Packet::from_ethernet(Instant::ZERO, frame);
        assert_eq!(original.ip_offset(), Some(14));
        for _ in 0..2000 {
            let mut packet = original.clone();
            Corrupt::corrupt(&mut packet, &mut rng);
            assert!(packet.corrupted);
            let flipped: u32 = packet
                .data
                .iter()
                .zip(&original.data)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(flipped, 1);
            let at = packet
                .data
                .iter()
                .zip(&original.data)
                .position(|(a, b)| a != b);
            assert!(at.unwrap() >= 14);
        }
        // No bytes: only the flag.
        let mut synthetic = Packet::synthetic(Instant::ZERO, 1500, 0, Ecn::NotEct);
        Corrupt::corrupt(&mut synthetic, &mut rng);
        assert!(synthetic.corrupted && synthetic.data.is_empty());
        // Bytes but no IP header: anywhere.
        let mut raw = Packet::from_ip(Instant::ZERO, vec![0u8; 3]);
        Corrupt::corrupt(&mut raw, &mut rng);
        assert_eq!(raw.data.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
    }

    #[test]
    fn corrupt_stage_counts_and_passes_everything() {
        let mut stage = Corrupt::new(chance(1.0, 0.0), Rng::seed_from(1));
        let mut verdicts = Verdicts::default();
        for i in 0..10 {
            let now = Instant::from_millis(i);
            stage.enqueue(
                now,
                Packet::synthetic(now, 10, 0, Ecn::NotEct),
                &mut verdicts,
            );
        }
        assert_eq!(stage.corrupted, 10);
        assert_eq!(stage.len_packets(), 10);
        assert!(stage.dequeue(Instant::from_millis(0)).is_some());
        assert!(stage.dequeue(Instant::from_millis(0)).is_none());
        assert_eq!(stage.poll_at(), Some(Instant::from_millis(1)));
    }
}
