//! Each line's path MTU, probed with the tunnel's own datagrams (RFC 4821), so no datagram
//! bigger than what crosses the line is sent and the tunnel's MTU follows the smallest line.
//!
//! A line's interface says how large a datagram it can send, not what the path behind it
//! carries: a PPPoE hop, a tunnel or a 4G core network in between may carry less, and the
//! ICMP messages that would say so are often filtered, so large datagrams vanish while
//! small ones (the reports) pass and the line looks alive. A probe is a Data datagram
//! padded to the size under test (a Padding frame), sent with DF; the receiver answers with
//! a ProbeAck naming its seq. The search is `pathlab_probe::mtu::MtuSearch`, the one
//! `pathlab capacity` runs: a size is too big after three probes of it vanish, one that
//! arrives once is proven, bisection to the byte. Sizes here are UDP payloads.
//!
//! Until a search ends, data uses only what is proven: first [`SMALLEST_PAYLOAD`] (an IPv4
//! packet of 576 bytes, which every IPv4 path carries), then each size that comes back. On
//! a path as wide as its interface the search takes two probes and one round trip. It runs
//! when the session opens, when the line comes back after being down, and every
//! [`RESEARCH_EVERY`], since paths change.

use pathlab_core::{Duration, Instant};
use pathlab_probe::control::Direction;
use pathlab_probe::mtu::MtuSearch;

/// The smallest probe: the UDP payload of a 576-byte IPv4 packet.
pub const SMALLEST_PAYLOAD: usize = 576 - 28;
/// How often a line searches again for its path MTU (RFC 4821 section 7.7: 10 minutes).
pub const RESEARCH_EVERY: Duration = Duration::from_secs(600);
/// How long a probe may take before it counts as lost, at least; twice the line's round
/// trip if that is longer.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(150);

/// A probe in flight.
#[derive(Debug, Clone, Copy)]
struct Probe {
    seq: u64,
    size: usize,
    sent: Instant,
}

/// Probes remembered to tell a lost probe from a lost datagram in the peer's reports.
const REMEMBERED: usize = 16;

/// One line's path MTU: what its interface carries, what is proven, the search.
#[derive(Debug)]
pub struct LineMtu {
    /// The latest probes' seqs, and whether each was acknowledged.
    sent: std::collections::VecDeque<(u64, bool)>,
    interface: usize,
    limit: usize,
    search: Option<MtuSearch>,
    probe: Option<Probe>,
    next_search: Instant,
    probes: u64,
    lost: u64,
}

impl LineMtu {
    /// A line whose interface sends UDP payloads up to `interface` bytes; its search starts
    /// at once.
    pub fn new(interface: usize, now: Instant) -> LineMtu {
        let mut mtu = LineMtu {
            sent: std::collections::VecDeque::new(),
            interface,
            limit: interface,
            search: None,
            probe: None,
            next_search: now,
            probes: 0,
            lost: 0,
        };
        mtu.restart(now);
        mtu
    }

    /// The largest datagram (UDP payload) data may use now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether a search is under way.
    pub fn searching(&self) -> bool {
        self.search.is_some()
    }

    /// Probes sent and lost (too big, or lost) since the line started.
    pub fn probes(&self) -> (u64, u64) {
        (self.probes, self.lost)
    }

    /// Searches again, trusting only what every path carries (the line came back from
    /// down: it may be another path now).
    pub fn restart(&mut self, now: Instant) {
        self.search_again(now);
        self.limit = SMALLEST_PAYLOAD.min(self.interface);
    }

    /// Starts a search; data keeps the current limit meanwhile (a path that shrank loses
    /// its large datagrams until the search ends, as it did before it started).
    fn search_again(&mut self, now: Instant) {
        let smallest = SMALLEST_PAYLOAD.min(self.interface);
        // Payload sizes on both sides: the IP version's headers cancel out.
        let local = (self.interface + 28) as u32;
        self.search = MtuSearch::new(local, smallest as u32, false).ok();
        self.probe = None;
        self.next_search = now + RESEARCH_EVERY;
    }

    /// The size of the probe to send at `now`, if one is due; `rtt` is the line's smoothed
    /// round trip. A probe out longer than its timeout counts as lost first.
    pub fn probe_due(&mut self, now: Instant, rtt: Option<Duration>) -> Option<usize> {
        if self.search.is_none() && now >= self.next_search {
            self.search_again(now);
        }
        if let Some(probe) = self.probe {
            if now < probe.sent + timeout(rtt) {
                return None;
            }
            self.probe = None;
            self.lost += 1;
            self.record(probe.size, false);
        }
        let size = self.search.as_mut()?.next_size();
        match size {
            Some(size) => Some(size as usize),
            None => {
                self.finish();
                None
            }
        }
    }

    /// The probe of `size` went out as datagram `seq` at `now`.
    pub fn on_probe_sent(&mut self, seq: u64, size: usize, now: Instant) {
        self.probes += 1;
        if self.sent.len() == REMEMBERED {
            self.sent.pop_front();
        }
        self.sent.push_back((seq, false));
        self.probe = Some(Probe {
            seq,
            size,
            sent: now,
        });
    }

    /// The peer got datagram `seq` of `len_bytes` (a ProbeAck).
    pub fn on_ack(&mut self, seq: u64, len_bytes: usize) {
        if let Some(entry) = self.sent.iter_mut().find(|(s, _)| *s == seq) {
            entry.1 = true;
        }
        let Some(probe) = self.probe else {
            return; // late: its size was judged lost already, and will be probed again
        };
        if probe.seq != seq || probe.size != len_bytes {
            return;
        }
        self.probe = None;
        self.record(probe.size, true);
    }

    /// Probes with a seq in `(from, to]` not acknowledged: the peer's report up to `to`
    /// comes after the acknowledgements of what it got (they share its datagram, first),
    /// so these were too big, not lost to congestion.
    pub fn lost_between(&self, from: u64, to: u64) -> u64 {
        self.sent
            .iter()
            .filter(|&&(seq, acked)| seq > from && seq <= to && !acked)
            .count() as u64
    }

    /// When a probe in flight times out (or the next search starts).
    pub fn poll_at(&self, rtt: Option<Duration>) -> Instant {
        match self.probe {
            Some(probe) => probe.sent + timeout(rtt),
            None if self.search.is_some() => Instant::ZERO, // a probe is due now
            None => self.next_search,
        }
    }

    fn record(&mut self, size: usize, arrived: bool) {
        let Some(search) = self.search.as_mut() else {
            return;
        };
        if search.record(size as u32, arrived).is_err() {
            // Not even the smallest probe arrives: the line is down or drops our probes;
            // liveness judges the line, and the search starts again when it comes back.
            self.search = None;
            return;
        }
        self.limit = self.limit.max(search.passed() as usize);
    }

    fn finish(&mut self) {
        if let Some(search) = self.search.take() {
            self.limit = search.result(Direction::Up).payload_bytes as usize;
        }
    }

    /// Probes remembered (at most 16).
    pub fn remembered(&self) -> usize {
        self.sent.len()
    }
}

fn timeout(rtt: Option<Duration>) -> Duration {
    let twice = rtt.map_or(Duration::from_millis(500), |rtt| rtt.saturating_mul(2));
    twice.max(PROBE_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a line's search against a path that carries payloads up to `path`, each probe
    /// answered after `rtt` unless it is too big or its ordinal is in `lose`.
    fn run(interface: usize, path: usize, lose: &[u64]) -> (LineMtu, Instant) {
        let rtt = Duration::from_millis(40);
        let mut now = Instant::ZERO;
        let mut mtu = LineMtu::new(interface, now);
        let mut seq = 0;
        for _ in 0..400 {
            if let Some(size) = mtu.probe_due(now, Some(rtt)) {
                seq += 1;
                assert!(mtu.limit() <= path, "data never exceeds what is proven");
                mtu.on_probe_sent(seq, size, now);
                if size <= path && !lose.contains(&seq) {
                    now += rtt;
                    mtu.on_ack(seq, size);
                    continue;
                }
            }
            if !mtu.searching() {
                break;
            }
            now = mtu.poll_at(Some(rtt)).max(now);
        }
        (mtu, now)
    }

    #[test]
    fn a_path_as_wide_as_the_interface_is_proven_in_two_probes() {
        let (mtu, took) = run(1472, 1472, &[]);
        assert!(!mtu.searching());
        assert_eq!(mtu.limit(), 1472);
        assert_eq!(mtu.probes(), (2, 0));
        assert_eq!(took, Instant::ZERO + Duration::from_millis(80));
    }

    #[test]
    fn a_narrower_path_is_found_to_the_byte_and_data_never_exceeds_it() {
        for path in [548, 1000, 1252, 1371, 1471] {
            let (mtu, _) = run(1472, path, &[]);
            assert!(!mtu.searching());
            assert_eq!(mtu.limit(), path, "path {path}");
        }
    }

    #[test]
    fn a_lost_probe_is_tried_again_before_its_size_is_judged_too_big() {
        // The second probe (1472 bytes) is lost once: two more tries, the second arrives.
        let (mtu, _) = run(1472, 1472, &[2]);
        assert_eq!(mtu.limit(), 1472);
        assert_eq!(mtu.probes(), (3, 1));
    }

    #[test]
    fn a_late_or_foreign_ack_changes_nothing_and_the_search_repeats_in_ten_minutes() {
        let now = Instant::ZERO;
        let mut mtu = LineMtu::new(1472, now);
        let size = mtu.probe_due(now, None).unwrap();
        mtu.on_probe_sent(1, size, now);
        mtu.on_ack(2, size);
        mtu.on_ack(1, size + 1);
        assert_eq!(mtu.limit(), SMALLEST_PAYLOAD);
        assert!(mtu.probe_due(now, None).is_none(), "one probe at a time");
        let (mut done, end) = run(1472, 1400, &[]);
        assert!(done.probe_due(end, None).is_none());
        assert!(done.probe_due(end + RESEARCH_EVERY, None).is_some());
        assert_eq!(done.limit(), 1400, "a periodic search keeps what was found");
        done.restart(end + RESEARCH_EVERY);
        assert_eq!(
            done.limit(),
            SMALLEST_PAYLOAD,
            "a line back from down trusts nothing"
        );
    }
}
