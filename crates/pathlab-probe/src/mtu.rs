//! Packetization-layer path MTU discovery (RFC 4821) with UDP probes: the search, not the
//! sockets.
//!
//! ICMP "fragmentation needed" messages are often filtered, so the classic discovery
//! (RFC 1191) waits forever on a path that silently drops large packets. RFC 4821 asks the
//! layer above instead: send a probe of a given size with DF set and see whether it
//! arrives. A probe that does not arrive may simply be lost, so a size is judged too big
//! only after [`TRIES`] probes of it are all missing; a size that arrives once is proven.
//!
//! The search is a bisection over the UDP payload size between a size known to pass (the
//! smallest probe, checked first) and one known to fail (one byte more than the sender's
//! own interface carries). It tries the upper end first, because most paths carry what
//! their first link carries, then halves the interval until the two ends meet: the largest
//! size that passed is the path MTU, exact to the byte.

use serde::{Deserialize, Serialize};

use crate::control::Direction;

/// Probes of one size that must all vanish before the size is judged too big.
pub const TRIES: u32 = 3;

/// IPv4 header (no options) and UDP header, bytes.
pub const IPV4_UDP_OVERHEAD: u32 = 20 + 8;
/// IPv6 header (no extension headers) and UDP header, bytes.
pub const IPV6_UDP_OVERHEAD: u32 = 40 + 8;

/// What a search found in one direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathMtu {
    /// Which way the probes went.
    pub direction: Direction,
    /// The largest IP packet (header included) that crossed the path with DF set.
    pub mtu_bytes: u32,
    /// Its UDP payload.
    pub payload_bytes: u32,
    /// The MTU of the sender's own route (its interface): where the search started.
    pub local_mtu_bytes: u32,
    /// Probes sent, retries included.
    pub probes: u32,
    /// Probes that never arrived (too big, or lost).
    pub lost: u32,
    /// IPv6 (else IPv4).
    pub ipv6: bool,
}

/// The IP and UDP header bytes around a probe's payload.
pub fn overhead(ipv6: bool) -> u32 {
    if ipv6 {
        IPV6_UDP_OVERHEAD
    } else {
        IPV4_UDP_OVERHEAD
    }
}

/// Why a search could not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MtuError {
    /// Even the smallest probe never arrived: the path drops UDP, or is down.
    #[error(
        "none of {TRIES} probes of {0} bytes arrived: the path drops these UDP probes or is down"
    )]
    NothingArrives(u32),
    /// The sender's interface cannot send even the smallest probe.
    #[error("the sender's route carries at most {local} bytes, less than the smallest probe ({smallest})")]
    RouteTooSmall {
        /// The route's MTU.
        local: u32,
        /// The smallest probe's IP size.
        smallest: u32,
    },
}

/// The bisection's state: payload sizes `[passed, failed)` still undecided.
#[derive(Debug, Clone)]
pub struct MtuSearch {
    /// Largest payload known to arrive (0 until the smallest probe has).
    passed: u32,
    /// Smallest payload known not to arrive (or not to fit the sender's route).
    failed: u32,
    /// The smallest probe payload.
    smallest: u32,
    /// The size now being tried, and how many of its probes vanished.
    trying: u32,
    misses: u32,
    probes: u32,
    lost: u32,
    ipv6: bool,
    local_mtu: u32,
}

impl MtuSearch {
    /// A search for a sender whose route carries `local_mtu` bytes (IP), with probes of at
    /// least `smallest` payload bytes.
    pub fn new(local_mtu: u32, smallest: u32, ipv6: bool) -> Result<MtuSearch, MtuError> {
        let largest = local_mtu.saturating_sub(overhead(ipv6));
        if largest < smallest {
            return Err(MtuError::RouteTooSmall {
                local: local_mtu,
                smallest: smallest + overhead(ipv6),
            });
        }
        Ok(MtuSearch {
            passed: 0,
            failed: largest + 1,
            smallest,
            trying: smallest,
            misses: 0,
            probes: 0,
            lost: 0,
            ipv6,
            local_mtu,
        })
    }

    /// The payload size to probe next, or `None` when the search is over.
    pub fn next_size(&mut self) -> Option<u32> {
        if self.passed != 0 && self.passed + 1 >= self.failed {
            return None;
        }
        self.probes += 1;
        Some(self.trying)
    }

    /// The probe of `size` (the one [`MtuSearch::next_size`] gave) arrived or not. Returns an
    /// error when the smallest probe never arrives.
    pub fn record(&mut self, size: u32, arrived: bool) -> Result<(), MtuError> {
        debug_assert_eq!(size, self.trying);
        if arrived {
            self.passed = self.passed.max(size);
            self.misses = 0;
        } else {
            self.lost += 1;
            self.misses += 1;
            if self.misses < TRIES {
                return Ok(());
            }
            if self.passed == 0 {
                return Err(MtuError::NothingArrives(size + overhead(self.ipv6)));
            }
            self.failed = self.failed.min(size);
            self.misses = 0;
        }
        self.trying = if self.passed == self.smallest && self.failed == self.largest() + 1 {
            // The smallest passed: the sender's own MTU is the likeliest answer.
            self.largest()
        } else {
            self.passed + (self.failed - self.passed) / 2
        };
        Ok(())
    }

    /// The sender's route says this payload does not fit at all (EMSGSIZE): judged at once.
    pub fn too_big_here(&mut self, size: u32) {
        self.failed = self.failed.min(size);
        self.misses = 0;
        self.trying = self.passed + (self.failed - self.passed) / 2;
    }

    /// The largest payload proven to arrive so far (0 before any probe has).
    pub fn passed(&self) -> u32 {
        self.passed
    }

    fn largest(&self) -> u32 {
        self.local_mtu.saturating_sub(overhead(self.ipv6))
    }

    /// The result, once [`MtuSearch::next_size`] has returned `None`.
    pub fn result(&self, direction: Direction) -> PathMtu {
        PathMtu {
            direction,
            mtu_bytes: self.passed + overhead(self.ipv6),
            payload_bytes: self.passed,
            local_mtu_bytes: self.local_mtu,
            probes: self.probes,
            lost: self.lost,
            ipv6: self.ipv6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a path that carries payloads up to `limit` and loses the
    /// probes whose ordinal is in `lose`.
    fn search(local_mtu: u32, limit: u32, lose: &[u32]) -> Result<PathMtu, MtuError> {
        let mut search = MtuSearch::new(local_mtu, 64, false)?;
        let mut ordinal = 0;
        while let Some(size) = search.next_size() {
            ordinal += 1;
            let arrived = size <= limit && !lose.contains(&ordinal);
            search.record(size, arrived)?;
            assert!(ordinal < 200, "the search ends");
        }
        Ok(search.result(Direction::Up))
    }

    #[test]
    fn a_path_as_wide_as_the_route_takes_two_probes() {
        let found = search(1500, 1472, &[]).unwrap();
        assert_eq!((found.mtu_bytes, found.payload_bytes), (1500, 1472));
        assert_eq!(found.probes, 2);
    }

    #[test]
    fn a_narrower_path_is_found_to_the_byte() {
        for mtu in [1400, 1280, 1499, 576, 93, 9000] {
            let found = search(9000, mtu - 28, &[]).unwrap();
            assert_eq!(found.mtu_bytes, mtu, "path mtu {mtu}");
            // Bisection: each size that vanishes costs TRIES probes.
            assert!(found.probes <= 2 + 14 * TRIES, "{} probes", found.probes);
        }
    }

    #[test]
    fn a_lost_probe_is_not_mistaken_for_a_too_big_one() {
        // The second probe (the route's full size, which passes) is lost once.
        let found = search(1500, 1472, &[2]).unwrap();
        assert_eq!(found.mtu_bytes, 1500);
        assert_eq!(found.lost, 1);
    }

    #[test]
    fn nothing_arriving_and_a_tiny_route_are_errors() {
        assert_eq!(search(1500, 0, &[]), Err(MtuError::NothingArrives(92)));
        assert!(matches!(
            MtuSearch::new(80, 64, false),
            Err(MtuError::RouteTooSmall { local: 80, .. })
        ));
    }

    #[test]
    fn emsgsize_halves_at_once() {
        let mut search = MtuSearch::new(9000, 64, true).unwrap();
        assert_eq!(search.next_size(), Some(64));
        search.record(64, true).unwrap();
        let top = search.next_size().unwrap();
        assert_eq!(top, 9000 - 48);
        search.too_big_here(top);
        assert_eq!(search.next_size(), Some(64 + (top - 64) / 2));
    }
}
