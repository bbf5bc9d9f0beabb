//! Round trips: per-packet RTT, loss each way, and the one-way split.
//!
//! Each reply carries when the reflector received the request and when it sent the reply,
//! on its own clock, and how many requests it had received so far. The round trip is the
//! client's receive time minus its send time, less the time the reply waited in the
//! reflector. Loss splits by direction: requests the reflector never counted were lost on
//! the way up, replies to counted requests that never came back on the way down.
//!
//! The one-way split needs the offset between the two clocks. It is estimated from the
//! fastest round trips (the 10% fastest, whose one-way parts carry the least queueing): if
//! the reflector's clock makes a one-way part negative, it must be off by at least that
//! much, and the offset is the smallest correction that makes both directions'
//! minima non-negative; otherwise the clocks are taken to agree (offset 0), as they do for
//! hosts synchronized by NTP or PTP, or sharing a machine. Unlike the symmetric NTP
//! estimate, this keeps asymmetric paths asymmetric when the clocks are right; when they
//! are not, the split is a bound, and the report says which case it is.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Which clock timed a round trip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimedBy {
    /// The kernel's stamps (`SO_TIMESTAMPING`): the request's when the device took it, the
    /// reply's when it arrived. Free of the program's own wake-up and scheduling delays.
    Kernel,
    /// The program's readings of its clock around its system calls, because the kernel
    /// gave no stamp for one side: they include how late the program woke.
    #[default]
    UserSpace,
}

/// How many round trips of a figure each clock timed ([`TimedBy`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTripClocks {
    /// Timed by the kernel's stamps on both sides.
    pub kernel: u64,
    /// Timed in user space, for want of a kernel stamp.
    pub user_space: u64,
}

impl RoundTripClocks {
    /// Counts one round trip.
    pub fn count(&mut self, timed_by: TimedBy) {
        match timed_by {
            TimedBy::Kernel => self.kernel += 1,
            TimedBy::UserSpace => self.user_space += 1,
        }
    }

    /// The counts of `timed_by`'s clocks.
    pub fn of(timed_by: impl IntoIterator<Item = TimedBy>) -> RoundTripClocks {
        let mut clocks = RoundTripClocks::default();
        for t in timed_by {
            clocks.count(t);
        }
        clocks
    }

    /// The clock of every round trip, if one clock timed them all.
    pub fn only(&self) -> Option<TimedBy> {
        match (self.kernel, self.user_space) {
            (_, 0) if self.kernel > 0 => Some(TimedBy::Kernel),
            (0, _) if self.user_space > 0 => Some(TimedBy::UserSpace),
            _ => None,
        }
    }

    /// Which clock, in words, for a figure's line: `timed by the kernel`, `timed in user
    /// space`, `timed by the kernel (3 of 50 in user space)`, or `clock not recorded` for
    /// a result written before the clock was.
    pub fn describe(&self) -> String {
        match (self.kernel, self.user_space) {
            (0, 0) => "clock not recorded".into(),
            (_, 0) => "timed by the kernel".into(),
            (0, _) => "timed in user space".into(),
            (kernel, user_space) => format!(
                "timed by the kernel ({user_space} of {} in user space)",
                kernel + user_space
            ),
        }
    }
}

impl std::ops::AddAssign for RoundTripClocks {
    fn add_assign(&mut self, other: RoundTripClocks) {
        self.kernel += other.kernel;
        self.user_space += other.user_space;
    }
}

/// One reply as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTrip {
    /// Sequence number of the request.
    pub seq: u64,
    /// Client clock when the request left, ns.
    pub sent_ns: u64,
    /// Reflector clock when the request arrived, ns.
    pub reflector_received_ns: u64,
    /// Reflector clock when the reply left, ns.
    pub reflector_sent_ns: u64,
    /// Client clock when the reply arrived, ns.
    pub received_ns: u64,
    /// Whether `sent_ns` and `received_ns` are the kernel's stamps or the client's own
    /// readings.
    #[serde(default)]
    pub timed_by: TimedBy,
}

impl RoundTrip {
    /// The round trip less the reflector's hold time, ns.
    pub fn rtt_ns(&self) -> i64 {
        let total = self.received_ns as i64 - self.sent_ns as i64;
        let hold = self.reflector_sent_ns as i64 - self.reflector_received_ns as i64;
        total - hold.max(0)
    }

    /// Upward one-way delay on the raw clocks (includes the offset), ns.
    fn up_raw(&self) -> i64 {
        self.reflector_received_ns as i64 - self.sent_ns as i64
    }

    /// Downward one-way delay on the raw clocks (includes minus the offset), ns.
    fn down_raw(&self) -> i64 {
        self.received_ns as i64 - self.reflector_sent_ns as i64
    }
}

/// Percentiles of a delay, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Smallest.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: f64,
}

/// Percentiles from an HDR histogram (4 significant digits: 0.01% resolution); minimum,
/// maximum and mean exact.
pub fn percentiles(values: impl Iterator<Item = i64>) -> Percentiles {
    let mut histogram =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 4).expect("valid bounds");
    let (mut min, mut max, mut sum, mut count) = (u64::MAX, 0u64, 0f64, 0u64);
    for value in values {
        let value = value.max(1) as u64;
        let _ = histogram.record(value);
        min = min.min(value);
        max = max.max(value);
        sum += value as f64;
        count += 1;
    }
    if count == 0 {
        return Percentiles::default();
    }
    Percentiles {
        min_ns: min,
        p50_ns: histogram.value_at_quantile(0.5).clamp(min, max),
        p90_ns: histogram.value_at_quantile(0.9).clamp(min, max),
        p99_ns: histogram.value_at_quantile(0.99).clamp(min, max),
        max_ns: max,
        mean_ns: sum / count as f64,
    }
}

/// How the clock offset was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffsetBasis {
    /// No probe contradicts agreeing clocks: offset 0, the split is as measured.
    ClocksAgree,
    /// A one-way part was negative: the offset is the smallest that fixes it, and the
    /// split is a bound.
    Corrected,
}

/// What a round-trip test found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RttReport {
    /// Requests sent.
    pub sent: u64,
    /// Requests the reflector received and answered.
    pub reflector_received: u64,
    /// Requests the reflector received and dropped unanswered: faster than the test's
    /// rate or beyond its count (a client that sent in bursts); not path loss.
    #[serde(default)]
    pub reflector_dropped: u64,
    /// Distinct replies received.
    pub replies: u64,
    /// Requests lost on the way up.
    pub lost_up: u64,
    /// Replies lost on the way down.
    pub lost_down: u64,
    /// Duplicate replies.
    pub duplicates: u64,
    /// Round-trip time percentiles (HDR histogram, 3 significant digits).
    pub rtt: Percentiles,
    /// Upward one-way delay after the offset correction.
    pub up: Percentiles,
    /// Downward one-way delay after the offset correction.
    pub down: Percentiles,
    /// The reflector's clock minus the client's, as estimated, ns.
    pub clock_offset_ns: i64,
    /// How it was estimated.
    pub offset_basis: OffsetBasis,
    /// How late the client sent its requests against the schedule.
    pub send_error: Percentiles,
    /// Every round trip, in arrival order: (seq, rtt ns).
    pub series: Vec<(u64, i64)>,
    /// When each round trip of `series` was sent, ns after the earliest of them (results
    /// written before this field existed have none).
    #[serde(default)]
    pub series_sent_ns: Vec<u64>,
    /// Which clock timed the client's side of the round trips (the reflector's hold time
    /// is its own reading before it sends): all zero in results written before it was
    /// recorded.
    #[serde(default)]
    pub timed_by: RoundTripClocks,
}

/// Analyses the replies (in arrival order) of a test that sent `sent` requests, of which
/// the reflector says it received `reflector_received`; `send_errors_ns` are how late each
/// request left against its schedule.
pub fn analyse(
    replies: &[RoundTrip],
    sent: u64,
    reflector_received: u64,
    reflector_dropped: u64,
    send_errors_ns: &[u64],
) -> RttReport {
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<RoundTrip> = replies
        .iter()
        .copied()
        .filter(|r| seen.insert(r.seq))
        .collect();
    let duplicates = (replies.len() - distinct.len()) as u64;
    // The fastest tenth of the round trips bound the clock offset.
    let mut by_rtt: Vec<&RoundTrip> = distinct.iter().collect();
    by_rtt.sort_by_key(|r| r.rtt_ns());
    let fastest = &by_rtt[..by_rtt.len().div_ceil(10)];
    let min_up = fastest.iter().map(|r| r.up_raw()).min().unwrap_or(0);
    let min_down = fastest.iter().map(|r| r.down_raw()).min().unwrap_or(0);
    // up_raw = up + offset, down_raw = down - offset.
    let (offset, basis) = if min_up >= 0 && min_down >= 0 {
        (0, OffsetBasis::ClocksAgree)
    } else if min_up < 0 {
        (min_up, OffsetBasis::Corrected)
    } else {
        (-min_down, OffsetBasis::Corrected)
    };
    let replies_count = distinct.len() as u64;
    RttReport {
        sent,
        reflector_received,
        reflector_dropped,
        replies: replies_count,
        lost_up: sent.saturating_sub(reflector_received + reflector_dropped),
        lost_down: reflector_received.saturating_sub(replies_count),
        duplicates,
        rtt: percentiles(distinct.iter().map(RoundTrip::rtt_ns)),
        up: percentiles(distinct.iter().map(|r| r.up_raw() - offset)),
        down: percentiles(distinct.iter().map(|r| r.down_raw() + offset)),
        clock_offset_ns: offset,
        offset_basis: basis,
        send_error: percentiles(send_errors_ns.iter().map(|&e| e as i64)),
        series: distinct.iter().map(|r| (r.seq, r.rtt_ns())).collect(),
        series_sent_ns: {
            let first = distinct.iter().map(|r| r.sent_ns).min().unwrap_or(0);
            distinct.iter().map(|r| r.sent_ns - first).collect()
        },
        timed_by: RoundTripClocks::of(distinct.iter().map(|r| r.timed_by)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies over a path of `up` and `down` ns, the reflector's clock `offset` ahead and
    /// holding each request 20 us; every 10th packet queued 1 ms extra upwards.
    fn replies(up: i64, down: i64, offset: i64) -> Vec<RoundTrip> {
        (0..200u64)
            .map(|seq| {
                let sent = 1_000_000_000 + seq as i64 * 10_000_000;
                let queue = if seq % 10 == 0 { 1_000_000 } else { 0 };
                let reflector_received = sent + up + queue + offset;
                let reflector_sent = reflector_received + 20_000;
                RoundTrip {
                    seq,
                    sent_ns: sent as u64,
                    reflector_received_ns: reflector_received as u64,
                    reflector_sent_ns: reflector_sent as u64,
                    received_ns: (reflector_sent - offset + down) as u64,
                    timed_by: if seq == 7 {
                        TimedBy::UserSpace
                    } else {
                        TimedBy::Kernel
                    },
                }
            })
            .collect()
    }

    #[test]
    fn asymmetric_path_with_agreeing_clocks_splits_as_it_is() {
        let report = analyse(&replies(10_000_000, 30_000_000, 0), 200, 200, 0, &[]);
        assert_eq!(report.offset_basis, OffsetBasis::ClocksAgree);
        // Within the histogram's 0.01%.
        assert!(
            report.rtt.p50_ns.abs_diff(40_000_000) <= 4_000,
            "40 ms round trip, hold time removed"
        );
        assert_eq!(report.up.min_ns, 10_000_000);
        assert!(report.down.p50_ns.abs_diff(30_000_000) <= 3_000);
        // Sent every 10 ms, on the clock of the first request.
        assert_eq!(report.series_sent_ns.len(), report.series.len());
        assert_eq!(report.series_sent_ns[7], 70_000_000);
        // One of the 200 had no kernel stamp.
        assert_eq!(
            report.timed_by,
            RoundTripClocks {
                kernel: 199,
                user_space: 1
            }
        );
        assert_eq!(
            report.timed_by.describe(),
            "timed by the kernel (1 of 200 in user space)"
        );
        assert_eq!(report.timed_by.only(), None);
    }

    #[test]
    fn clocks_say_which_timed_a_figure() {
        let kernel = RoundTripClocks::of([TimedBy::Kernel; 3]);
        assert_eq!(kernel.only(), Some(TimedBy::Kernel));
        assert_eq!(kernel.describe(), "timed by the kernel");
        let user = RoundTripClocks::of([TimedBy::UserSpace]);
        assert_eq!(user.only(), Some(TimedBy::UserSpace));
        assert_eq!(user.describe(), "timed in user space");
        let mut both = kernel;
        both += user;
        assert_eq!(
            both,
            RoundTripClocks {
                kernel: 3,
                user_space: 1
            }
        );
        // A result written before the clock was recorded.
        let old: RttReport = serde_json::from_str(&{
            let mut value = serde_json::to_value(analyse(&replies(1, 1, 0), 200, 200, 0, &[]))
                .expect("serializes");
            value.as_object_mut().unwrap().remove("timed_by");
            value.to_string()
        })
        .expect("an old report reads");
        assert_eq!(old.timed_by, RoundTripClocks::default());
        assert_eq!(old.timed_by.describe(), "clock not recorded");
        assert_eq!(
            serde_json::to_string(&TimedBy::UserSpace).unwrap(),
            "\"user-space\""
        );
    }

    #[test]
    fn a_clock_behind_is_corrected_to_the_smallest_offset_that_explains_it() {
        // Reflector 50 ms behind: raw up = 10 - 50 < 0.
        let report = analyse(
            &replies(10_000_000, 30_000_000, -50_000_000),
            200,
            200,
            0,
            &[],
        );
        assert_eq!(report.offset_basis, OffsetBasis::Corrected);
        assert_eq!(
            report.clock_offset_ns, -40_000_000,
            "the smallest offset making up >= 0"
        );
        assert_eq!(
            report.up.min_ns, 1,
            "the bound puts the whole minimum on the other side"
        );
        assert!(
            report.rtt.p50_ns.abs_diff(40_000_000) <= 4_000,
            "round trips need no offset"
        );
    }

    #[test]
    fn loss_is_split_by_direction_and_duplicates_counted() {
        let mut all = replies(1_000_000, 1_000_000, 0);
        all.truncate(150); // 150 replies came back
        all.push(all[3]);
        // 170 reflected and 10 dropped by the reflector (over the test's rate): 180
        // arrived, and what the reflector dropped is not the path's loss either way.
        let report = analyse(&all, 200, 170, 10, &[5_000, 7_000]);
        assert_eq!(
            (report.lost_up, report.lost_down, report.duplicates),
            (20, 20, 1)
        );
        assert_eq!(report.send_error.max_ns, 7_000);
    }
}
