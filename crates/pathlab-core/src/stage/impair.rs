//! Instant impairments: duplication and corruption, and the correlated coin they flip.
//! STUB until implemented.

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
    probability: f64,
    rng: Rng,
}

impl CorrelatedChance {
    /// A coin for `chance`.
    pub fn new(chance: Chance, rng: Rng) -> CorrelatedChance {
        CorrelatedChance {
            probability: chance.probability.get(),
            rng,
        }
    }

    /// Flips the coin.
    pub fn flip(&mut self) -> bool {
        self.rng.chance(self.probability)
    }
}

/// Duplicates packets.
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
            out: VecDeque::new(),
            duplicated: 0,
        }
    }
}

impl Stage for Duplicate {
    fn enqueue(&mut self, _now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        let _ = self.coin.flip();
        self.out.push_back(packet);
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

/// Flips one random bit of packets.
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
    fn enqueue(&mut self, _now: Instant, packet: Packet, _verdicts: &mut Verdicts) {
        let _ = (self.coin.flip(), &mut self.rng);
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
