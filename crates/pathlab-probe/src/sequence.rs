//! Loss, duplicates and reordering of a probe stream (RFC 4737).
//!
//! Feed the sequence numbers in arrival order. A packet whose number is below the next
//! expected one (one more than the largest seen) is reordered (RFC 4737 section 3.3); its
//! extent is how many arrivals earlier the first packet with a larger number came
//! (section 4.2.1). Duplicates are counted and left out of the reordering figures.

use serde::{Deserialize, Serialize};

/// Counts of a stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SequenceStats {
    /// Probes the sender sent.
    pub sent: u64,
    /// Distinct probes received.
    pub received: u64,
    /// Probes never received.
    pub lost: u64,
    /// Extra copies received.
    pub duplicates: u64,
    /// Distinct probes received out of order (RFC 4737 Type-P-Reordered).
    pub reordered: u64,
    /// `reordered / received`.
    pub reordered_ratio: f64,
    /// Largest reordering extent, in packets.
    pub max_extent: u64,
    /// Numbers outside `0..sent` (a confused or malicious sender).
    pub out_of_range: u64,
}

/// Tracks sequence numbers as they arrive.
#[derive(Debug, Clone)]
pub struct SequenceTracker {
    expected: u64,
    seen: Vec<bool>,
    /// Largest number among arrivals `0..=i`, per distinct arrival (non-decreasing).
    prefix_max: Vec<u64>,
    next_expected: u64,
    received: u64,
    duplicates: u64,
    reordered: u64,
    max_extent: u64,
    out_of_range: u64,
}

impl SequenceTracker {
    /// A tracker for a stream of `expected` probes numbered from 0.
    pub fn new(expected: u64) -> SequenceTracker {
        SequenceTracker {
            expected,
            seen: vec![false; expected as usize],
            prefix_max: Vec::new(),
            next_expected: 0,
            received: 0,
            duplicates: 0,
            reordered: 0,
            max_extent: 0,
            out_of_range: 0,
        }
    }

    /// Records an arrival; returns false for a duplicate or out-of-range number (which
    /// the caller should then ignore for delay figures).
    pub fn arrive(&mut self, seq: u64) -> bool {
        if seq >= self.expected {
            self.out_of_range += 1;
            return false;
        }
        let slot = &mut self.seen[seq as usize];
        if *slot {
            self.duplicates += 1;
            return false;
        }
        *slot = true;
        self.received += 1;
        if seq < self.next_expected {
            self.reordered += 1;
            // The first arrival whose prefix maximum exceeds seq is the first packet with
            // a larger number; the extent is how many arrivals ago that was.
            let first_larger = self.prefix_max.partition_point(|&max| max <= seq);
            let extent = (self.prefix_max.len() - first_larger) as u64;
            self.max_extent = self.max_extent.max(extent);
        } else {
            self.next_expected = seq + 1;
        }
        let max = self.prefix_max.last().map_or(seq, |&m| m.max(seq));
        self.prefix_max.push(max);
        true
    }

    /// The counts, given how many probes the sender says it sent.
    pub fn stats(&self, sent: u64) -> SequenceStats {
        SequenceStats {
            sent,
            received: self.received,
            lost: sent.saturating_sub(self.received),
            duplicates: self.duplicates,
            reordered: self.reordered,
            reordered_ratio: if self.received == 0 {
                0.0
            } else {
                self.reordered as f64 / self.received as f64
            },
            max_extent: self.max_extent,
            out_of_range: self.out_of_range,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(arrivals: &[u64], sent: u64) -> SequenceStats {
        let mut tracker = SequenceTracker::new(sent);
        for &seq in arrivals {
            tracker.arrive(seq);
        }
        tracker.stats(sent)
    }

    #[test]
    fn rfc4737_examples() {
        // Section 3.3's example: 1 2 3 5 6 4 7 (here from 0): 4 is reordered, extent 2.
        let stats = run(&[0, 1, 2, 4, 5, 3, 6], 7);
        assert_eq!((stats.reordered, stats.max_extent, stats.lost), (1, 2, 0));
        // Two late packets: 0 3 1 2: both reordered, extents 1 and 2.
        let stats = run(&[0, 3, 1, 2], 4);
        assert_eq!((stats.reordered, stats.max_extent), (2, 2));
        assert!((stats.reordered_ratio - 0.5).abs() < 1e-12);
    }

    #[test]
    fn loss_duplicates_and_strays_are_counted_apart() {
        let stats = run(&[0, 1, 1, 3, 99, 3], 5);
        assert_eq!(stats.received, 3);
        assert_eq!(stats.lost, 2);
        assert_eq!(stats.duplicates, 2);
        assert_eq!(stats.out_of_range, 1);
        assert_eq!(stats.reordered, 0);
    }

    proptest! {
        #[test]
        fn counts_add_up_for_any_arrival_order(order in Just((0..50u64).collect::<Vec<_>>()).prop_shuffle(), keep in proptest::collection::vec(any::<bool>(), 50)) {
            let arrivals: Vec<u64> = order.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(s, _)| s).collect();
            let stats = run(&arrivals, 50);
            prop_assert_eq!(stats.received + stats.lost, 50);
            prop_assert_eq!(stats.received as usize, arrivals.len());
            // Brute force: reordered iff some earlier arrival has a larger number.
            let brute = arrivals.iter().enumerate().filter(|(i, s)| arrivals[..*i].iter().any(|e| e > s)).count();
            prop_assert_eq!(stats.reordered as usize, brute);
        }
    }
}
