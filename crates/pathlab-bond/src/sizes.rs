//! How much state an end holds: the entries of every table, map, queue and buffer that
//! grows with what it sees, as numbers a leak would grow ([`crate::Bond::state_sizes`],
//! [`crate::Server::state_sizes`]).
//!
//! Each component adds its own entries under a name of its own (`reorder.streams`,
//! `fair.flows`, `server.routes`...); a server adds its sessions' together under the
//! sessions' names. What is not listed is bounded by construction, and says so where it
//! is defined: fixed-size arrays (the replay floors' folded slots, the header
//! compressor's context slots, the rate controller's bucket ring), one entry per line,
//! and the buffers reused for one datagram or one packet at a time (bounded by the
//! largest of either).

use std::collections::BTreeMap;

/// Entries held, by name (see the module's doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateSizes(BTreeMap<&'static str, usize>);

impl StateSizes {
    /// No entries.
    pub fn new() -> StateSizes {
        StateSizes::default()
    }

    /// Adds `len` entries under `name` (to those already counted there).
    pub fn add(&mut self, name: &'static str, len: usize) {
        *self.0.entry(name).or_default() += len;
    }

    /// Entries counted under `name` (0 if none).
    pub fn get(&self, name: &str) -> usize {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Every name and its entries, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        self.0.iter().map(|(name, len)| (*name, *len))
    }

    /// Keeps, for each name, the larger of this and `other`'s figure (the peak of a
    /// series of samples).
    pub fn keep_max(&mut self, other: &StateSizes) {
        for (name, len) in other.iter() {
            let entry = self.0.entry(name).or_default();
            *entry = (*entry).max(len);
        }
    }

    /// The names whose entries exceed `bound`'s (a name `bound` lacks counts as 0), with
    /// both figures: `(name, here, bound)`.
    pub fn exceeding(&self, bound: &StateSizes) -> Vec<(&'static str, usize, usize)> {
        self.iter()
            .filter(|(name, len)| *len > bound.get(name))
            .map(|(name, len)| (name, len, bound.get(name)))
            .collect()
    }
}

impl std::fmt::Display for StateSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (name, len) in self.iter() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{name}={len}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_add_up_keep_their_peak_and_name_what_grew() {
        let mut a = StateSizes::new();
        a.add("x", 2);
        a.add("x", 3);
        a.add("y", 1);
        assert_eq!(a.get("x"), 5);
        assert_eq!(a.get("z"), 0);
        let mut b = StateSizes::new();
        b.add("x", 4);
        b.add("z", 7);
        let mut peak = a.clone();
        peak.keep_max(&b);
        assert_eq!((peak.get("x"), peak.get("y"), peak.get("z")), (5, 1, 7));
        assert_eq!(b.exceeding(&a), vec![("z", 7, 0)]);
        assert!(a.exceeding(&peak).is_empty());
        assert_eq!(a.to_string(), "x=5 y=1");
    }
}
