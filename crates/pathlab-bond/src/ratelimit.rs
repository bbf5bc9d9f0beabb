//! Handshakes per source address, as WireGuard's rate limiter counts them (sans-IO).
//!
//! Under load the server spends a Diffie-Hellman only on an Initiation whose `mac2` proves
//! that its sender receives at its source address (the cookie). That stops spoofed floods,
//! not a flood from one real address: a host that fetched its cookie may send valid
//! Initiations as fast as it likes (any holder of the simple mode's key can make them, and
//! captured ones replay). [`SourceLimiter`] holds each source to a token bucket, as
//! WireGuard's `ratelimiter.c` does: [`HANDSHAKES_PER_SECOND`] with a burst of
//! [`HANDSHAKE_BURST`], per IPv4 address or IPv6 /64 (one host's addresses), applied only
//! under load.
//!
//! The table is bounded: a source idle for [`IDLE_EXPIRY`] is forgotten (its bucket is full
//! again after 250 ms, so forgetting it loses nothing), and when [`SourceLimiter::new`]'s
//! bound is reached a new source is refused until old ones expire, as WireGuard refuses
//! when its table is full: a flood from many addresses then waits, and the sources already
//! in the table (a real client among them) keep their buckets.

use std::collections::HashMap;
use std::net::IpAddr;

use pathlab_core::{Duration, Instant};

/// Handshakes a second each source is allowed under load (WireGuard's
/// `PACKETS_PER_SECOND`).
pub const HANDSHAKES_PER_SECOND: u64 = 20;
/// Handshakes a source may send at once (WireGuard's `PACKETS_BURSTABLE`).
pub const HANDSHAKE_BURST: u64 = 5;
/// A source unheard this long is forgotten (its bucket full again long before).
pub const IDLE_EXPIRY: Duration = Duration::from_secs(1);
/// Sources tracked at once by default (WireGuard's table holds up to 65,536; this many
/// entries take about 4 MB).
pub const DEFAULT_MAX_SOURCES: usize = 65_536;

/// Nanoseconds of credit one handshake costs.
const COST_NS: u64 = 1_000_000_000 / HANDSHAKES_PER_SECOND;
/// The most credit a bucket holds.
const MAX_CREDIT_NS: u64 = COST_NS * HANDSHAKE_BURST;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    last: Instant,
    credit_ns: u64,
}

/// One token bucket per source, in a bounded table whose entries expire (module doc).
#[derive(Debug, Clone)]
pub struct SourceLimiter {
    buckets: HashMap<IpAddr, Bucket>,
    max_sources: usize,
    /// When idle sources were last swept out (once per [`IDLE_EXPIRY`] at most).
    swept: Instant,
}

impl SourceLimiter {
    /// An empty table of at most `max_sources` sources (at least 1).
    pub fn new(max_sources: usize) -> SourceLimiter {
        SourceLimiter {
            buckets: HashMap::new(),
            max_sources: max_sources.max(1),
            swept: Instant::ZERO,
        }
    }

    /// Whether a handshake from `source` at `now` is within its bucket (it takes a token if
    /// so).
    pub fn allow(&mut self, now: Instant, source: IpAddr) -> bool {
        self.expire(now);
        let source = host_of(source);
        let bucket = match self.buckets.get_mut(&source) {
            Some(bucket) => bucket,
            None => {
                if self.buckets.len() >= self.max_sources {
                    return false;
                }
                self.buckets.entry(source).or_insert(Bucket {
                    last: now,
                    credit_ns: MAX_CREDIT_NS,
                })
            }
        };
        let earned = now.saturating_since(bucket.last).as_nanos();
        bucket.credit_ns = bucket.credit_ns.saturating_add(earned).min(MAX_CREDIT_NS);
        bucket.last = now;
        if bucket.credit_ns < COST_NS {
            return false;
        }
        bucket.credit_ns -= COST_NS;
        true
    }

    /// Sources tracked now (at most the bound given to [`SourceLimiter::new`]).
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no source is tracked.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Forgets the sources idle for [`IDLE_EXPIRY`] at `now` (a sweep of the table, done at
    /// most once per [`IDLE_EXPIRY`]).
    pub fn expire(&mut self, now: Instant) {
        if now.saturating_since(self.swept) < IDLE_EXPIRY {
            return;
        }
        self.buckets
            .retain(|_, bucket| now.saturating_since(bucket.last) < IDLE_EXPIRY);
        self.swept = now;
    }
}

/// The host a source address stands for: an IPv4 address (an IPv4-mapped IPv6 one as
/// IPv4), or an IPv6 address's /64 (a host may use any address of its prefix).
fn host_of(source: IpAddr) -> IpAddr {
    match source.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn at_ms(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn v4(n: u32) -> IpAddr {
        // 198.18.0.0/15 holds 131,072 addresses; beyond, the IPv6 test range.
        if n < 1 << 17 {
            IpAddr::V4(Ipv4Addr::from(0xC612_0000 + n))
        } else {
            let base = u128::from(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0));
            IpAddr::V6((base + (u128::from(n) << 64)).into())
        }
    }

    /// One source sending as fast as it can for 10 s: the burst, then 20 a second (the
    /// bucket's theory: 5 + 20 x 10 = 205), while another source still has its burst.
    #[test]
    fn one_source_is_held_to_its_bucket_and_another_is_not_held_with_it() {
        let mut limiter = SourceLimiter::new(16);
        let allowed = (0..100_000u64)
            .filter(|&n| limiter.allow(at_ms(n / 10), v4(1)))
            .count();
        // The clock ends at 9,999.9 ms: the refill of 9.9999 s gives 199 whole handshakes.
        assert_eq!(allowed, 5 + 199);
        let other = (0..10)
            .filter(|_| limiter.allow(at_ms(10_000), v4(2)))
            .count();
        assert_eq!(other, 5, "another source keeps its own burst");
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_ipv4_is_its_ipv4() {
        let mut limiter = SourceLimiter::new(16);
        for n in 0..5u16 {
            let address = Ipv6Addr::new(0x2001, 2, 0, 1, n, n, n, n);
            assert!(limiter.allow(Instant::ZERO, IpAddr::V6(address)));
        }
        assert!(!limiter.allow(
            Instant::ZERO,
            IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 1, 9, 9, 9, 9))
        ));
        assert!(limiter.allow(Instant::ZERO, "2001:2:0:2::1".parse().unwrap()));
        for _ in 0..5 {
            assert!(limiter.allow(Instant::ZERO, "198.18.0.9".parse().unwrap()));
        }
        assert!(!limiter.allow(Instant::ZERO, "::ffff:198.18.0.9".parse().unwrap()));
        assert_eq!(limiter.len(), 3);
    }

    /// A million handshakes from 200,000 sources over 100 s of virtual time: the table never
    /// holds more than its bound nor more than a second's sources, and is empty a second
    /// after the last. A source in the table keeps its place while new ones are refused.
    #[test]
    fn a_million_handshakes_from_many_sources_keep_the_table_bounded() {
        let bound = 4_096;
        let mut limiter = SourceLimiter::new(bound);
        let mut most = 0;
        let mut refused = 0u64;
        for n in 0..1_000_000u64 {
            // 10,000 handshakes a second, the sources in turn (each every 20 s).
            let now = Instant::ZERO + Duration::from_micros(n * 100);
            let source = v4(u32::try_from(n % 200_000).unwrap());
            if !limiter.allow(now, source) {
                refused += 1;
            }
            most = most.max(limiter.len());
        }
        assert!(most <= bound, "{most} sources tracked");
        assert!(refused > 0, "the bound was reached");
        let later = Instant::ZERO + Duration::from_secs(102);
        let _ = limiter.allow(later, v4(1));
        assert_eq!(limiter.len(), 1, "every idle source expired");
    }

    #[test]
    fn a_tracked_source_keeps_its_bucket_when_the_table_is_full() {
        let mut limiter = SourceLimiter::new(2);
        assert!(limiter.allow(Instant::ZERO, v4(1)));
        assert!(limiter.allow(Instant::ZERO, v4(2)));
        assert!(!limiter.allow(at_ms(1), v4(3)), "full: a new source waits");
        assert!(limiter.allow(at_ms(1), v4(1)));
        assert!(limiter.allow(at_ms(1_500), v4(3)), "after the sweep");
    }
}
