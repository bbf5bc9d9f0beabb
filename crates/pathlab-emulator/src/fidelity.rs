//! The fidelity guard's bookkeeping: how late an emulator sends against its model, over
//! the whole run and over the last second, and how many seconds were late.
//!
//! An emulator that cannot keep up sends its packets after their model departure, and
//! what passes through it is then a different link than the one asked for. Each direction
//! keeps a [`Lateness`]: a histogram of the whole run, and a sliding window of the last
//! second as ten 100 ms slots rotated in place (no allocation and O(1) work per packet).
//! Every whole second of uptime (`[k s, k+1 s)`) is judged once it ends: its p99 above
//! the bound makes it a late second.
//!
//! This module reads no clock: every entry point takes `now`, the emulator's instant, so
//! the window is tested in virtual time. It prints nothing either: [`LateWarnings`] turns
//! successive summaries into the warnings `pathlab emulate` prints, rate-limited.

use pathlab_core::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// The lateness bound when none is given: a p99 above it over a second is a late second.
pub const DEFAULT_LATE_BOUND: Duration = Duration::from_millis(1);

/// The window's resolution: one slot of it.
pub const SLOT: Duration = Duration::from_millis(100);

/// Slots in the window: one second.
const SLOTS: usize = 10;

/// Sub-buckets per power of two: a bucket is at most 1/32 (3.1%) wider than its lower edge.
const SUB_BUCKETS: u64 = 32;
/// Below this many microseconds every microsecond has its own bucket.
const LINEAR_US: u64 = 2 * SUB_BUCKETS;
/// Powers of two above [`LINEAR_US`]: up to 2^32 us (71 minutes).
const OCTAVES: u64 = 26;
/// Buckets of a histogram; the last also holds everything beyond.
const BUCKETS: usize = (LINEAR_US + OCTAVES * SUB_BUCKETS) as usize;

/// The upper bounds of the coarse histogram `/metrics` exposes (Prometheus buckets), ns:
/// 10 us to 1 s. Counted exactly per packet, beside the fine histogram whose edges do not
/// fall on round numbers.
pub const EXPOSED_EDGES_NS: [u64; 13] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    1_000_000_000,
];

/// The bucket of a lateness: 1 us wide below 64 us, then 32 per power of two.
fn bucket(lateness_ns: u64) -> usize {
    let us = lateness_ns / 1_000;
    if us < LINEAR_US {
        return us as usize;
    }
    let octave = u64::from(us.ilog2()); // 6 and up
    let sub = (us >> (octave - 5)) & (SUB_BUCKETS - 1);
    ((LINEAR_US + (octave - 6) * SUB_BUCKETS + sub) as usize).min(BUCKETS - 1)
}

/// The upper edge of bucket `index`, ns (exclusive).
fn upper_edge_ns(index: usize) -> u64 {
    let index = index as u64;
    if index < LINEAR_US {
        return (index + 1) * 1_000;
    }
    let octave = (index - LINEAR_US) / SUB_BUCKETS + 6;
    let sub = (index - LINEAR_US) % SUB_BUCKETS;
    ((SUB_BUCKETS + sub + 1) << (octave - 5)) * 1_000
}

/// The quantile `q` of a histogram of `count` values whose largest is `max_ns`, in the
/// bucket [`pathlab_core::quantile::bucket_of`] finds (nearest rank), reported as its
/// upper edge (a bound, not an estimate) capped by the largest value. The one quantile of
/// lateness: the whole run's and the window's.
fn quantile_ns(counts: impl Iterator<Item = u64>, count: u64, max_ns: u64, q: f64) -> u64 {
    if count == 0 {
        return 0;
    }
    match pathlab_core::quantile::bucket_of(counts, count, q) {
        Some(index) if index < BUCKETS - 1 => upper_edge_ns(index).min(max_ns),
        // The last bucket has no upper edge (and counts short of `count` cannot happen).
        _ => max_ns,
    }
}

/// How late a direction sent compared with its model: the whole run, the last second,
/// and the seconds that were late.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatenessSummary {
    /// Packets measured.
    pub packets: u64,
    /// Median lateness in ns.
    pub p50_ns: u64,
    /// 99th percentile in ns.
    pub p99_ns: u64,
    /// Largest lateness in ns.
    pub max_ns: u64,
    /// Packets sent over the last second (the ten most recent 100 ms slots, the newest
    /// still filling: 0.9 to 1 s).
    #[serde(default)] // added with the fidelity guard
    pub last_second_packets: u64,
    /// 99th percentile of their lateness, ns (0 without packets).
    #[serde(default)] // added with the fidelity guard
    pub last_second_p99_ns: u64,
    /// The bound a second's p99 must stay under, ns; `None` when the guard is off.
    #[serde(default)] // added with the fidelity guard
    pub bound_ns: Option<u64>,
    /// Whole seconds of uptime that ended (those judged).
    #[serde(default)] // added with the fidelity guard
    pub seconds: u64,
    /// Of those, the ones whose p99 lateness exceeded the bound.
    #[serde(default)] // added with the fidelity guard
    pub late_seconds: u64,
    /// The highest p99 of any whole second, ns.
    #[serde(default)] // added with the fidelity guard
    pub worst_second_p99_ns: u64,
    /// Packets whose lateness was at most each of [`EXPOSED_EDGES_NS`] (cumulative).
    #[serde(default)] // added with /metrics
    pub at_most: Vec<u64>,
    /// The sum of every packet's lateness, ns.
    #[serde(default)] // added with /metrics
    pub sum_ns: u64,
}

/// The last second of lateness: ten 100 ms slots of histograms, rotated in place.
///
/// Slot `n` covers `[n x 100 ms, (n+1) x 100 ms)` of the emulator's time and lives at
/// position `n % 10`, so the ten positions hold exactly one whole second when its last
/// slot ends: that is when the second is judged.
#[derive(Debug, Clone)]
struct Window {
    /// `SLOTS x BUCKETS` counts, slot by slot.
    counts: Box<[u32]>,
    /// Values in each slot.
    slot_count: [u32; SLOTS],
    /// Largest value in each slot, ns.
    slot_max_ns: [u64; SLOTS],
    /// The number of the slot `now` is in.
    current: u64,
    /// When the current slot ends.
    current_end: Instant,
}

/// Slot number of an instant.
fn slot_of(at: Instant) -> u64 {
    at.as_nanos() / SLOT.as_nanos()
}

impl Window {
    fn new() -> Window {
        Window {
            counts: vec![0; SLOTS * BUCKETS].into_boxed_slice(),
            slot_count: [0; SLOTS],
            slot_max_ns: [0; SLOTS],
            current: 0,
            current_end: Instant::ZERO + SLOT,
        }
    }

    fn clear(&mut self, position: usize) {
        self.counts[position * BUCKETS..(position + 1) * BUCKETS].fill(0);
        self.slot_count[position] = 0;
        self.slot_max_ns[position] = 0;
    }

    /// Moves the window to the slot of `now`, clearing the slots it enters, and has
    /// `seconds` judge the window whenever it holds a whole second that just ended. At
    /// most 20 slots are stepped through: after ten the window is empty, and the seconds
    /// after that are judged empty in one go.
    fn advance(&mut self, now: Instant, seconds: &mut Seconds) {
        if now < self.current_end {
            return;
        }
        let target = slot_of(now);
        let mut steps = 0;
        while self.current < target {
            if steps == 2 * SLOTS {
                // Every position is empty: the remaining seconds' boundaries had nothing.
                seconds.judge_empty(target / SLOTS as u64 - self.current / SLOTS as u64);
                self.current = target;
                break;
            }
            self.current += 1;
            steps += 1;
            if self.current.is_multiple_of(SLOTS as u64) {
                seconds.judge(self);
            }
            self.clear((self.current % SLOTS as u64) as usize);
        }
        self.current_end = Instant::from_nanos((self.current + 1) * SLOT.as_nanos());
    }

    /// Adds a value to the current slot (the caller advanced to it).
    fn add(&mut self, lateness_ns: u64) {
        let position = (self.current % SLOTS as u64) as usize;
        let counts = &mut self.counts[position * BUCKETS..(position + 1) * BUCKETS];
        let cell = &mut counts[bucket(lateness_ns)];
        *cell = cell.saturating_add(1);
        self.slot_count[position] = self.slot_count[position].saturating_add(1);
        self.slot_max_ns[position] = self.slot_max_ns[position].max(lateness_ns);
    }

    fn count(&self) -> u64 {
        self.slot_count.iter().map(|&n| u64::from(n)).sum()
    }

    fn quantile_ns(&self, q: f64) -> u64 {
        let max_ns = self.slot_max_ns.iter().copied().max().unwrap_or(0);
        let per_bucket = (0..BUCKETS).map(|b| {
            (0..SLOTS)
                .map(|slot| u64::from(self.counts[slot * BUCKETS + b]))
                .sum::<u64>()
        });
        quantile_ns(per_bucket, self.count(), max_ns, q)
    }
}

/// The verdicts on whole seconds.
#[derive(Debug, Clone, Copy)]
struct Seconds {
    bound: Option<Duration>,
    /// Whole seconds judged.
    judged: u64,
    /// Of those, the ones over the bound.
    late: u64,
    /// The highest p99 of a judged second, ns.
    worst_p99_ns: u64,
}

impl Seconds {
    /// Judges the second `window` holds.
    fn judge(&mut self, window: &Window) {
        self.judged += 1;
        let p99 = window.quantile_ns(0.99);
        self.worst_p99_ns = self.worst_p99_ns.max(p99);
        if self.bound.is_some_and(|bound| p99 > bound.as_nanos()) {
            self.late += 1;
        }
    }

    /// Judges `count` seconds without a packet: none is late.
    fn judge_empty(&mut self, count: u64) {
        self.judged += count;
    }
}

/// How late one direction sends: the whole run, the last second, the late seconds.
#[derive(Debug, Clone)]
pub struct Lateness {
    /// The whole run, bucket by bucket.
    run: Box<[u64]>,
    count: u64,
    max_ns: u64,
    /// Packets per interval of [`EXPOSED_EDGES_NS`] (the last: beyond the largest).
    exposed: [u64; EXPOSED_EDGES_NS.len() + 1],
    sum_ns: u64,
    window: Window,
    seconds: Seconds,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness::new()
    }
}

impl Lateness {
    /// Nothing measured yet, the bound [`DEFAULT_LATE_BOUND`].
    pub fn new() -> Lateness {
        Lateness {
            run: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            max_ns: 0,
            exposed: [0; EXPOSED_EDGES_NS.len() + 1],
            sum_ns: 0,
            window: Window::new(),
            seconds: Seconds {
                bound: Some(DEFAULT_LATE_BOUND),
                judged: 0,
                late: 0,
                worst_p99_ns: 0,
            },
        }
    }

    /// Sets the bound a second's p99 must stay under (`None`: no second is judged late).
    /// Seconds already judged keep their verdict.
    pub fn set_bound(&mut self, bound: Option<Duration>) {
        self.seconds.bound = bound;
    }

    /// Judges every whole second that ended by `now`.
    pub fn advance(&mut self, now: Instant) {
        self.window.advance(now, &mut self.seconds);
    }

    /// Counts a packet sent at `now` that was `lateness` after its model departure.
    pub fn record(&mut self, now: Instant, lateness: Duration) {
        let lateness_ns = lateness.as_nanos();
        self.advance(now);
        self.window.add(lateness_ns);
        self.run[bucket(lateness_ns)] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(lateness_ns);
        self.exposed[EXPOSED_EDGES_NS.partition_point(|&edge| edge < lateness_ns)] += 1;
        self.sum_ns = self.sum_ns.saturating_add(lateness_ns);
    }

    /// The figures as of `now`.
    pub fn summary(&mut self, now: Instant) -> LatenessSummary {
        self.advance(now);
        let run = |q| quantile_ns(self.run.iter().copied(), self.count, self.max_ns, q);
        LatenessSummary {
            packets: self.count,
            p50_ns: run(0.5),
            p99_ns: run(0.99),
            max_ns: self.max_ns,
            last_second_packets: self.window.count(),
            last_second_p99_ns: self.window.quantile_ns(0.99),
            bound_ns: self.seconds.bound.map(Duration::as_nanos),
            seconds: self.seconds.judged,
            late_seconds: self.seconds.late,
            worst_second_p99_ns: self.seconds.worst_p99_ns,
            at_most: self.exposed[..EXPOSED_EDGES_NS.len()]
                .iter()
                .scan(0, |total, n| {
                    *total += n;
                    Some(*total)
                })
                .collect(),
            sum_ns: self.sum_ns,
        }
    }
}

/// How long a direction stays quiet between two warnings that it still sends late.
pub const WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// A warning about one direction, for a person to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateWarning {
    /// It started sending late (or did again, after having been on time).
    Late {
        /// p99 lateness over the last second, ns.
        p99_ns: u64,
        /// The bound, ns.
        bound_ns: u64,
    },
    /// It still sends late, [`WARNING_INTERVAL`] or more after the last warning.
    StillLate {
        /// p99 lateness over the last second, ns.
        p99_ns: u64,
        /// Since it started being late.
        late_for: Duration,
        /// Whole seconds judged late so far in the run.
        late_seconds: u64,
        /// Whole seconds judged so far.
        seconds: u64,
    },
    /// It sends on time again after a warning that it did not.
    OnTime {
        /// p99 lateness over the last second, ns.
        p99_ns: u64,
        /// How long it had been late.
        late_for: Duration,
    },
}

/// Decides, from successive [`LatenessSummary`]s of one direction, when to warn: once when
/// it starts sending late, at most once every [`WARNING_INTERVAL`] while it stays late,
/// and once when it is on time again. A direction that flaps is warned about at most
/// once per interval; its recoveries are only told after a warning was.
///
/// Call [`LateWarnings::observe`] with the emulator's instant and the direction's summary
/// as often as the summary changes (every 100 ms is enough: the window moves by slots).
#[derive(Debug, Clone, Default)]
pub struct LateWarnings {
    /// Since when it sends late (`None`: on time), and whether a warning said so.
    late: Option<(Instant, bool)>,
    /// When the last warning that it sends late was given.
    last_warning: Option<Instant>,
}

impl LateWarnings {
    /// What to tell, if anything, given the summary at `now`.
    pub fn observe(&mut self, now: Instant, summary: &LatenessSummary) -> Option<LateWarning> {
        let late = summary
            .bound_ns
            .is_some_and(|bound| summary.last_second_p99_ns > bound);
        let quiet = self
            .last_warning
            .is_none_or(|at| now.saturating_since(at) >= WARNING_INTERVAL);
        match (self.late, late) {
            (None, false) => None,
            (Some((since, announced)), false) => {
                self.late = None;
                announced.then(|| LateWarning::OnTime {
                    p99_ns: summary.last_second_p99_ns,
                    late_for: now.saturating_since(since),
                })
            }
            (None | Some((_, false)), true) => {
                let since = self.late.map_or(now, |(since, _)| since);
                self.late = Some((since, quiet));
                quiet.then(|| {
                    self.last_warning = Some(now);
                    LateWarning::Late {
                        p99_ns: summary.last_second_p99_ns,
                        bound_ns: summary.bound_ns.unwrap_or(0),
                    }
                })
            }
            (Some((since, true)), true) => quiet.then(|| {
                self.last_warning = Some(now);
                LateWarning::StillLate {
                    p99_ns: summary.last_second_p99_ns,
                    late_for: now.saturating_since(since),
                    late_seconds: summary.late_seconds,
                    seconds: summary.seconds,
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_exposed_histogram_counts_each_packet_at_every_edge_at_or_above_it() {
        let mut lateness = Lateness::new();
        let now = Instant::from_nanos(0);
        // On an edge counts at that edge (le is "at most"); 1 ns over does not.
        for ns in [
            0,
            10_000,
            10_001,
            999_999,
            1_000_000,
            1_000_001,
            2_000_000_000,
        ] {
            lateness.record(now, Duration::from_nanos(ns));
        }
        let summary = lateness.summary(now);
        assert_eq!(summary.at_most.len(), EXPOSED_EDGES_NS.len());
        let at = |edge| summary.at_most[EXPOSED_EDGES_NS.iter().position(|&e| e == edge).unwrap()];
        assert_eq!(at(10_000), 2);
        assert_eq!(at(20_000), 3);
        assert_eq!(at(500_000), 3);
        assert_eq!(at(1_000_000), 5);
        assert_eq!(at(2_000_000), 6);
        assert_eq!(
            at(1_000_000_000),
            6,
            "2 s is beyond every edge, in +Inf only"
        );
        assert_eq!(
            summary.sum_ns,
            10_000 + 10_001 + 999_999 + 1_000_000 + 1_000_001 + 2_000_000_000
        );
    }

    #[test]
    fn buckets_are_1_us_below_64_us_then_at_most_one_32nd_wide() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0);
        assert_eq!(bucket(63_999), 63);
        assert_eq!(bucket(64_000), 64);
        assert_eq!(upper_edge_ns(63), 64_000);
        assert_eq!(upper_edge_ns(64), 66_000);
        let mut previous_edge = 0;
        for index in 0..BUCKETS - 1 {
            let edge = upper_edge_ns(index);
            assert!(edge > previous_edge, "edges grow at {index}");
            // Every value below an edge and at or above the previous one is in the bucket.
            assert_eq!(bucket(edge - 1), index, "{edge}");
            assert_eq!(bucket(edge), index + 1, "{edge}");
            if previous_edge >= LINEAR_US * 1_000 {
                assert!(
                    (edge - previous_edge) * 32 <= previous_edge,
                    "bucket {index}"
                );
            }
            previous_edge = edge;
        }
        // Beyond 71 minutes everything shares the last bucket.
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn run_quantiles_are_nearest_rank_bucket_upper_bounds_capped_by_the_maximum() {
        let mut lateness = Lateness::new();
        let at = Instant::from_millis(5);
        for ns in [500, 1_500, 2_500, 3_500] {
            lateness.record(at, Duration::from_nanos(ns));
        }
        let summary = lateness.summary(at);
        assert_eq!(summary.packets, 4);
        // Rank ceil(0.5 x 4) = 2: 1500 ns, in [1 us, 2 us).
        assert_eq!(summary.p50_ns, 2_000);
        assert_eq!(summary.p99_ns, 3_500);
        assert_eq!(summary.max_ns, 3_500);
        // Far beyond the old 10 ms cap: p99 of one value is that value.
        let mut long = Lateness::new();
        long.record(at, Duration::from_millis(50));
        let summary = long.summary(at);
        assert_eq!((summary.p99_ns, summary.max_ns), (50 * MS, 50 * MS));
        // 3.85 ms is reported within 1/32 above.
        let mut mid = Lateness::new();
        mid.record(at, Duration::from_micros(3_850));
        mid.record(at, Duration::from_micros(3_900));
        let p50 = mid.summary(at).p50_ns;
        assert!(
            (3_850_000..=3_850_000 + 3_850_000 / 32).contains(&p50),
            "{p50}"
        );
    }

    /// Feeds `n` packets of lateness `ns` at `at`.
    fn feed(lateness: &mut Lateness, at: Instant, n: usize, ns: u64) {
        for _ in 0..n {
            lateness.record(at, Duration::from_nanos(ns));
        }
    }

    #[test]
    fn the_window_holds_the_last_second_and_its_p99_is_nearest_rank() {
        let mut lateness = Lateness::new();
        // 0.0-0.1 s: 98 packets 10 us late, 2 packets 5 ms late. p99 of 100 is rank 99:
        // 5 ms (one of the two late ones).
        feed(&mut lateness, Instant::from_millis(50), 98, 10_000);
        feed(&mut lateness, Instant::from_millis(60), 2, 5 * MS);
        let s = lateness.summary(Instant::from_millis(99));
        assert_eq!(s.last_second_packets, 100);
        assert_eq!(s.last_second_p99_ns, 5 * MS);
        // 0.5 s: 900 more on time; 1000 in the window, p99 is rank 990: on time.
        feed(&mut lateness, Instant::from_millis(500), 900, 10_000);
        let s = lateness.summary(Instant::from_millis(550));
        assert_eq!(s.last_second_packets, 1_000);
        assert_eq!(
            s.last_second_p99_ns, 11_000,
            "the upper edge of [10, 11) us"
        );
        // The run's p99 is the same figure, over the same packets.
        assert_eq!(s.p99_ns, 11_000);
    }

    #[test]
    fn old_slots_expire_a_slot_at_a_time() {
        let mut lateness = Lateness::new();
        feed(&mut lateness, Instant::from_millis(50), 10, 5 * MS); // slot 0
        feed(&mut lateness, Instant::from_millis(950), 10, 2 * MS); // slot 9
                                                                    // At 0.999 s both are in the window.
        let s = lateness.summary(Instant::from_millis(999));
        assert_eq!(s.last_second_packets, 20);
        assert_eq!(s.last_second_p99_ns, 5 * MS);
        // At 1.0 s slot 10 takes slot 0's place: only the 2 ms ones are left.
        let s = lateness.summary(Instant::from_millis(1_000));
        assert_eq!(s.last_second_packets, 10);
        assert_eq!(s.last_second_p99_ns, 2 * MS);
        // At 1.9 s slot 9 is gone too.
        let s = lateness.summary(Instant::from_millis(1_900));
        assert_eq!(s.last_second_packets, 0);
        assert_eq!(s.last_second_p99_ns, 0);
        // The run remembers everything.
        assert_eq!(s.packets, 20);
        assert_eq!(s.max_ns, 5 * MS);
    }

    #[test]
    fn each_whole_second_is_judged_once_against_the_bound() {
        let mut lateness = Lateness::new();
        // Second 0: 100 packets, 2 of them 3 ms late: p99 (rank 99) is 3 ms > 1 ms: late.
        feed(&mut lateness, Instant::from_millis(100), 98, 20_000);
        feed(&mut lateness, Instant::from_millis(200), 2, 3 * MS);
        // Second 1: 100 packets, 1 of them 3 ms late: p99 is 21 us: on time.
        feed(&mut lateness, Instant::from_millis(1_100), 99, 20_000);
        feed(&mut lateness, Instant::from_millis(1_200), 1, 3 * MS);
        // Second 2: one packet 1 ms late, exactly the bound: not over it.
        feed(&mut lateness, Instant::from_millis(2_500), 1, MS);
        let s = lateness.summary(Instant::from_millis(2_999));
        assert_eq!(
            (s.seconds, s.late_seconds),
            (2, 1),
            "second 2 still running"
        );
        let s = lateness.summary(Instant::from_millis(3_000));
        assert_eq!((s.seconds, s.late_seconds), (3, 1));
        assert_eq!(s.worst_second_p99_ns, 3 * MS);
        assert_eq!(s.bound_ns, Some(MS));
        // A long idle stretch: every second judged, none late, in O(1).
        let s = lateness.summary(Instant::from_secs(3_600));
        assert_eq!((s.seconds, s.late_seconds), (3_600, 1));
        // Late again right after the idle hour, judged when that second ends.
        feed(&mut lateness, Instant::from_millis(3_600_500), 10, 2 * MS);
        let s = lateness.summary(Instant::from_secs(3_601));
        assert_eq!((s.seconds, s.late_seconds), (3_601, 2));
    }

    #[test]
    fn a_second_late_before_an_idle_gap_is_judged_when_the_gap_ends() {
        let mut lateness = Lateness::new();
        feed(&mut lateness, Instant::from_millis(900), 5, 4 * MS);
        // Nothing until 30 s: second 0 was late, the 29 after it empty.
        feed(&mut lateness, Instant::from_secs(30), 1, 0);
        let s = lateness.summary(Instant::from_secs(30));
        assert_eq!((s.seconds, s.late_seconds), (30, 1));
    }

    #[test]
    fn without_a_bound_no_second_is_late_but_the_window_still_measures() {
        let mut lateness = Lateness::new();
        lateness.set_bound(None);
        feed(&mut lateness, Instant::from_millis(10), 10, 50 * MS);
        let s = lateness.summary(Instant::from_secs(2));
        assert_eq!((s.seconds, s.late_seconds, s.bound_ns), (2, 0, None));
        assert_eq!(s.worst_second_p99_ns, 50 * MS);
        let s = lateness.summary(Instant::from_millis(2_050));
        assert_eq!(s.last_second_p99_ns, 0);
    }

    fn summary(p99_ns: u64) -> LatenessSummary {
        LatenessSummary {
            last_second_p99_ns: p99_ns,
            bound_ns: Some(MS),
            ..LatenessSummary::default()
        }
    }

    /// The warnings given observing every 100 ms from 0 for `p99_ns(t_ms)`.
    fn warnings(until_ms: u64, p99_ns: impl Fn(u64) -> u64) -> Vec<(u64, LateWarning)> {
        let mut warnings = LateWarnings::default();
        (0..=until_ms)
            .step_by(100)
            .filter_map(|t| {
                warnings
                    .observe(Instant::from_millis(t), &summary(p99_ns(t)))
                    .map(|w| (t, w))
            })
            .collect()
    }

    #[test]
    fn a_late_stretch_is_told_at_its_start_every_10_s_and_at_its_end() {
        // Late from 2 s to 25 s (exclusive).
        let told = warnings(30_000, |t| {
            if (2_000..25_000).contains(&t) {
                3 * MS
            } else {
                0
            }
        });
        let at: Vec<u64> = told.iter().map(|(t, _)| *t).collect();
        assert_eq!(at, [2_000, 12_000, 22_000, 25_000]);
        assert_eq!(
            told[0].1,
            LateWarning::Late {
                p99_ns: 3 * MS,
                bound_ns: MS
            }
        );
        assert!(
            matches!(told[1].1, LateWarning::StillLate { late_for, .. } if late_for == Duration::from_secs(10))
        );
        assert_eq!(
            told[3].1,
            LateWarning::OnTime {
                p99_ns: 0,
                late_for: Duration::from_secs(23)
            }
        );
    }

    #[test]
    fn a_flapping_direction_is_told_at_most_once_per_interval() {
        // Late for 1 s out of every 2 s, for a minute.
        let told = warnings(60_000, |t| if (t / 1_000) % 2 == 0 { 3 * MS } else { 0 });
        let late: Vec<u64> = told
            .iter()
            .filter(|(_, w)| !matches!(w, LateWarning::OnTime { .. }))
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(late, [0, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000]);
        // Each told stretch ends with one "on time again"; untold ones end silently.
        let on_time = told
            .iter()
            .filter(|(_, w)| matches!(w, LateWarning::OnTime { .. }))
            .count();
        assert_eq!(on_time, 6, "{told:?}");
    }

    #[test]
    fn the_bound_is_exclusive_and_off_means_silent() {
        assert!(warnings(5_000, |_| MS).is_empty());
        let mut warnings = LateWarnings::default();
        let off = LatenessSummary {
            last_second_p99_ns: 50 * MS,
            bound_ns: None,
            ..LatenessSummary::default()
        };
        assert_eq!(warnings.observe(Instant::ZERO, &off), None);
    }
}
