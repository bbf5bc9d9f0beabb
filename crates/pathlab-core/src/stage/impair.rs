//! Instant impairments: duplication and corruption, and the correlated coin they flip.
//!
//! Correlation here keeps the configured long-run rate, unlike netem's: `duplicate 1% 25%`
//! duplicates 1% of packets, and two successive decisions have correlation 25%. The coin is
//! a two-state Markov chain with P(event | event before) = c + (1-c)p and
//! P(event | no event before) = (1-c)p, whose stationary probability is p and whose lag-1
//! autocorrelation is c. (netem mixes the previous random number into the next one, which
//! changes the rate it produces.)

use std::collections::VecDeque;

use super::Stage;
use crate::packet::Packet;
use crate::rng::Rng;
use crate::spec::Chance;
use crate::time::Instant;
use crate::verdict::Verdicts;

/// A biased coin whose successive outcomes are correlated but whose long-run rate is the
/// configured probability.
#[derive(Debug, Clone)]
pub struct CorrelatedChance {
    after_event: f64,
    after_no_event: f64,
    last: bool,
    rng: Rng,
}

impl CorrelatedChance {
    /// A coin for `chance`.
    pub fn new(chance: Chance, rng: Rng) -> CorrelatedChance {
        let p = chance.probability.get();
        let c = chance.correlation.get();
        CorrelatedChance {
            after_event: c + (1.0 - c) * p,
            after_no_event: (1.0 - c) * p,
            last: false,
            rng,
        }
    }

    /// Flips the coin.
    #[inline]
    pub fn flip(&mut self) -> bool {
        let p = if self.last {
            self.after_event
        } else {
            self.after_no_event
        };
        self.last = self.rng.chance(p);
        self.last
    }
}

/// Duplicates packets: the original leaves first, then its copy.
#[derive(Debug)]
pub struct Duplicate {
    coin: CorrelatedChance,
    out: VecDeque<Packet>,
    /// Packets duplicated so far.
    pub duplicated: u64,
}

impl Duplicate {
    /// A duplication stage.
    pub fn new(chance: Chance, rng: Rng) -> Duplicate {
        Duplicate {
            coin: CorrelatedChance::new(chance, rng),
            out: VecDeque::with_capacity(2),
            duplicated: 0,
        }
    }
}

impl Stage for Duplicate {
    fn enqueue(&mut self, _now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        if self.coin.flip() {
            self.duplicated += 1;
            self.out.push_back(packet.clone());
        }
        self.out.push_front(packet);
    }

    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.out.pop_front()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.out.front().map(|p| p.arrival)
    }

    fn len_packets(&self) -> usize {
        self.out.len()
    }
}

/// Flips one random bit of packets: at or after the IP header when the bytes parsed (a
/// corrupted Ethernet header would only misdeliver the frame), anywhere otherwise; a
/// synthetic packet without bytes is only flagged.
#[derive(Debug)]
pub struct Corrupt {
    coin: CorrelatedChance,
    rng: Rng,
    out: Option<Packet>,
    /// Packets corrupted so far.
    pub corrupted: u64,
}

impl Corrupt {
    /// A corruption stage.
    pub fn new(chance: Chance, mut rng: Rng) -> Corrupt {
        Corrupt {
            coin: CorrelatedChance::new(chance, rng.fork()),
            rng,
            out: None,
            corrupted: 0,
        }
    }
}

impl Stage for Corrupt {
    fn enqueue(&mut self, _now: Instant, mut packet: Packet, _verdicts: &mut Verdicts) {
        if self.coin.flip() {
            let from = packet.ip_offset().unwrap_or(0);
            if from < packet.data.len() {
                let byte = from + self.rng.below((packet.data.len() - from) as u64) as usize;
                packet.data[byte] ^= 1 << self.rng.below(8);
            }
            packet.corrupted = true;
            self.corrupted += 1;
        }
        self.out = Some(packet);
    }

    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.out.take()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.out.as_ref().map(|p| p.arrival)
    }

    fn len_packets(&self) -> usize {
        usize::from(self.out.is_some())
    }
}

/// The 99.9% two-sided binomial bound on |k - np| (normal approximation): 3.29 standard
/// deviations, widened for a correlated coin by the variance inflation (1+c)/(1-c).
#[cfg(test)]
pub(crate) fn binomial_bound(n: f64, p: f64, c: f64) -> f64 {
    3.29 * (n * p * (1.0 - p) * (1.0 + c) / (1.0 - c)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;
    use crate::units::Probability;

    fn chance(p: f64, c: f64) -> Chance {
        Chance {
            probability: Probability::new(p).expect("valid"),
            correlation: Probability::new(c).expect("valid"),
        }
    }

    #[test]
    fn correlated_coin_keeps_its_rate_and_has_lag_one_correlation_c() {
        for (p, c) in [(0.01, 0.0), (0.05, 0.25), (0.2, 0.75)] {
            let mut coin = CorrelatedChance::new(chance(p, c), Rng::seed_from(11));
            let n = 400_000;
            let flips: Vec<f64> = (0..n).map(|_| f64::from(u8::from(coin.flip()))).collect();
            let events: f64 = flips.iter().sum();
            assert!(
                (events - n as f64 * p).abs() <= binomial_bound(n as f64, p, c),
                "p {p} c {c}: {events} events"
            );
            let mean = events / n as f64;
            let (mut cov, mut var) = (0.0, 0.0);
            for pair in flips.windows(2) {
                cov += (pair[0] - mean) * (pair[1] - mean);
                var += (pair[0] - mean) * (pair[0] - mean);
            }
            let lag1 = cov / var;
            assert!(
                (lag1 - c).abs() < 0.02,
                "p {p} c {c}: lag-1 correlation {lag1}"
            );
        }
    }

    #[test]
    fn duplicate_rate_is_within_the_binomial_bound_and_copies_follow() {
        let mut stage = Duplicate::new(chance(0.01, 0.0), Rng::seed_from(5));
        let mut verdicts = Verdicts::default();
        let n = 100_000;
        let mut out = 0;
        for id in 0..n {
            let mut packet = Packet::synthetic(Instant::ZERO, 100, 0, Ecn::NotEct);
            packet.id = id;
            stage.enqueue(Instant::ZERO, packet, &mut verdicts);
            let first = stage.dequeue(Instant::ZERO).expect("the original");
            assert_eq!(first.id, id);
            out += 1;
            while let Some(copy) = stage.dequeue(Instant::ZERO) {
                assert_eq!(copy.id, id);
                out += 1;
            }
        }
        let copies = (out - n) as f64;
        assert_eq!(copies, stage.duplicated as f64);
        assert!(
            (copies - 1000.0).abs() <= binomial_bound(n as f64, 0.01, 0.0),
            "{copies}"
        );
    }

    #[test]
    fn corrupt_flips_exactly_one_bit_after_the_ip_header() {
        let mut stage = Corrupt::new(chance(1.0, 0.0), Rng::seed_from(2));
        let mut verdicts = Verdicts::default();
        let mut frame = vec![0u8; 14 + 20 + 8];
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        frame[14] = 0x45;
        for _ in 0..1000 {
            let packet = Packet::from_ethernet(Instant::ZERO, frame.clone());
            stage.enqueue(Instant::ZERO, packet, &mut verdicts);
            let out = stage.dequeue(Instant::ZERO).expect("kept");
            let flipped: u32 = out
                .data
                .iter()
                .zip(&frame)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(flipped, 1);
            assert_eq!(out.data[..14], frame[..14], "Ethernet header untouched");
            assert!(out.corrupted);
        }
    }
}
