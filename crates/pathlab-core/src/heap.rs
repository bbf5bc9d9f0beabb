//! [`Earliest`]: an entry of a [`std::collections::BinaryHeap`] that pops the smallest key
//! first, for whatever holds items back until their time (the delay line's reordering,
//! the capture reader putting merged captures back in time order).

use std::cmp::Ordering;

/// A heap entry ordered by `key` alone, reversed: the standard [`BinaryHeap`] pops the
/// largest, so a heap of these pops the smallest key first. A key of a time and a
/// sequence number takes the earliest, and of equal times the first one pushed.
///
/// [`BinaryHeap`]: std::collections::BinaryHeap
#[derive(Debug)]
pub struct Earliest<K, V> {
    /// What orders the entries, smallest first.
    pub key: K,
    /// What rides along.
    pub value: V,
}

impl<K: Ord, V> PartialEq for Earliest<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl<K: Ord, V> Eq for Earliest<K, V> {}

impl<K: Ord, V> PartialOrd for Earliest<K, V> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord, V> Ord for Earliest<K, V> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    #[test]
    fn the_smallest_key_pops_first_and_equal_times_in_sequence() {
        let mut heap = BinaryHeap::new();
        for (time, sequence, value) in [(5, 1, 'a'), (3, 2, 'b'), (5, 0, 'c'), (9, 3, 'd')] {
            heap.push(Earliest {
                key: (time, sequence),
                value,
            });
        }
        let order: Vec<char> = std::iter::from_fn(|| heap.pop().map(|e| e.value)).collect();
        assert_eq!(order, ['b', 'c', 'a', 'd']);
    }
}
