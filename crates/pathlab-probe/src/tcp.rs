//! Bulk TCP tests: what each stream moved per interval, and what its sender's TCP stack
//! said about itself (`TCP_INFO`) along the way.

use serde::{Deserialize, Serialize};

/// Bytes a stream's end writes or reads per call, the buffer each end of a stream holds.
pub const TCP_CHUNK: usize = 128 * 1024;

/// One `TCP_INFO` sample of a sending socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSample {
    /// Since the stream started, ns.
    pub at_ns: u64,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Slow-start threshold, segments (a huge value before the first loss).
    pub ssthresh: u32,
    /// Smoothed RTT, us.
    pub srtt_us: u32,
    /// RTT variation, us.
    pub rttvar_us: u32,
    /// Segments retransmitted so far.
    pub retrans_segments: u32,
    /// Bytes retransmitted so far.
    pub retrans_bytes: u64,
    /// Bytes sent so far, retransmissions included.
    pub sent_bytes: u64,
    /// The kernel's delivery-rate estimate, bytes/s.
    pub delivery_rate: u64,
    /// The pacing rate, bytes/s.
    pub pacing_rate: u64,
    /// The MSS in use, bytes.
    pub mss: u32,
    /// Bytes the receiver acknowledged so far (`tcpi_bytes_acked`): what got through,
    /// as the sender knows it.
    #[serde(default)] // added in v1 with starved streams
    pub acked_bytes: u64,
    /// Retransmission timeouts in a row that no acknowledgement answered
    /// (`tcpi_retransmits`): above 0 while the sender, doubling its timeout each time,
    /// waits for the path to deliver anything it has outstanding. A receiver that stops
    /// reading leaves it at 0: it answers with a closed window, which the sender probes.
    #[serde(default)] // added in v1 with starved streams
    pub unanswered_timeouts: u8,
}

/// Which way a stream's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamDirection {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// One stream, as one end saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamReport {
    /// Stream number.
    pub index: u32,
    /// Bytes received per interval (the receiver's view), in order.
    pub interval_bytes: Vec<u64>,
    /// Total bytes received.
    pub bytes: u64,
    /// How long the receiver received, ns.
    pub receive_ns: u64,
    /// `TCP_INFO` samples (the sender's view).
    pub samples: Vec<TcpSample>,
    /// Set on an upward stream whose data stopped getting through and had not resumed
    /// when its client gave up waiting for the test's results ([`starvation`]); its
    /// counts are then its sender's ([`StreamReport::count_acknowledged`]).
    #[serde(default, skip_serializing_if = "Option::is_none")] // added in v1
    pub starved: Option<Starved>,
}

/// A stream that a queue or the path starved: none of its data got through for seconds,
/// and it was still getting none through when its client gave up waiting for the test's
/// results (an unfair queue's victim sits in retransmission backoff, its timeout doubling
/// each time: 1, 2, 4, 8 s).
/// A result of the path, not a failure of the measurement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Starved {
    /// The longest time none of its data got through, ns, to its sender's sampling
    /// period: from the sample that first showed an acknowledged count to the next that
    /// showed more, or to the last sample (when the client gave up).
    pub longest_gap_ns: u64,
    /// When that gap began, ns after the stream's start.
    pub gap_from_ns: u64,
}

impl Starved {
    /// How reports and summaries say it: `starved: no data for 14.2 s`.
    pub fn summary(&self) -> String {
        format!(
            "starved: no data for {:.1} s",
            self.longest_gap_ns as f64 * 1e-9
        )
    }
}

/// Whether a stream was starved, judged from its sender's `TCP_INFO` samples up to the
/// moment its client gave up waiting for the test's results (the last sample): it was if
/// the sender then, or at the test's end (`end_ns` after the stream's start), had data
/// outstanding that it had retransmitted on timeout with no acknowledgement since
/// ([`TcpSample::unanswered_timeouts`]), so the path, not the peer, held its data. A
/// stream in backoff at the test's end may get through in the grace after, once the
/// streams that starved it have ended, too late for its server's results (bond-fair's
/// FIFO held one from 1.6 s on). A peer that stopped reading (a frozen server)
/// acknowledges what it received and closes its window: not starved, the peer stopped
/// answering. With the longest time nothing got through ([`Starved::longest_gap_ns`]).
pub fn starvation(samples: &[TcpSample], end_ns: u64) -> Option<Starved> {
    let last = samples.last()?;
    let at_end = samples
        .iter()
        .rev()
        .find(|s| s.at_ns <= end_ns)
        .unwrap_or(last);
    if last.unanswered_timeouts == 0 && at_end.unanswered_timeouts == 0 {
        return None;
    }
    let mut longest = Starved::default();
    let mut gap = |from_ns: u64, to_ns: u64| {
        let gap_ns = to_ns.saturating_sub(from_ns);
        if gap_ns > longest.longest_gap_ns {
            longest = Starved {
                longest_gap_ns: gap_ns,
                gap_from_ns: from_ns,
            };
        }
    };
    // Nothing got through before the first acknowledgement either.
    let (mut since_ns, mut acked) = (0, 0);
    for sample in samples {
        if sample.acked_bytes > acked {
            gap(since_ns, sample.at_ns);
            (since_ns, acked) = (sample.at_ns, sample.acked_bytes);
        }
    }
    gap(since_ns, last.at_ns);
    Some(longest)
}

impl StreamReport {
    /// Counts an upward stream from its sender's samples, for a test whose results never
    /// came (the receiver's counts are the server's): bytes per interval and in all from
    /// what the receiver acknowledged, over the test's time (`duration_ns`) or until the
    /// last acknowledgement if later; and marks it [`starved`](Self::starved) if it was
    /// ([`starvation`]).
    pub fn count_acknowledged(&mut self, interval_ns: u64, duration_ns: u64) {
        let mut counter = IntervalCounter::new(interval_ns);
        let mut last_ns = 0;
        for sample in &self.samples {
            if sample.acked_bytes > counter.total {
                counter.add(sample.at_ns, sample.acked_bytes - counter.total);
                last_ns = sample.at_ns;
            }
        }
        self.interval_bytes = counter.intervals;
        self.bytes = counter.total;
        self.receive_ns = duration_ns.max(last_ns);
        self.starved = starvation(&self.samples, duration_ns);
    }
}

/// Interval sums of several streams.
pub fn sum_intervals(streams: &[&StreamReport]) -> Vec<u64> {
    let longest = streams
        .iter()
        .map(|s| s.interval_bytes.len())
        .max()
        .unwrap_or(0);
    (0..longest)
        .map(|i| {
            streams
                .iter()
                .map(|s| s.interval_bytes.get(i).copied().unwrap_or(0))
                .sum()
        })
        .collect()
}

/// Counts bytes into fixed intervals as they arrive.
#[derive(Debug, Clone)]
pub struct IntervalCounter {
    interval_ns: u64,
    /// Bytes per interval so far.
    pub intervals: Vec<u64>,
    /// Total.
    pub total: u64,
}

impl IntervalCounter {
    /// A counter of intervals of `interval_ns`.
    pub fn new(interval_ns: u64) -> IntervalCounter {
        IntervalCounter {
            interval_ns: interval_ns.max(1),
            intervals: Vec::new(),
            total: 0,
        }
    }

    /// Counts `bytes` that arrived `at_ns` after the start.
    pub fn add(&mut self, at_ns: u64, bytes: u64) {
        let index = (at_ns / self.interval_ns) as usize;
        if self.intervals.len() <= index {
            self.intervals.resize(index + 1, 0);
        }
        self.intervals[index] += bytes;
        self.total += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_land_in_their_interval_and_sums_line_up() {
        let mut counter = IntervalCounter::new(1_000);
        counter.add(10, 5);
        counter.add(2_500, 7);
        counter.add(999, 1);
        assert_eq!(counter.intervals, vec![6, 0, 7]);
        assert_eq!(counter.total, 13);
        let a = StreamReport {
            interval_bytes: vec![1, 2],
            ..StreamReport::default()
        };
        let b = StreamReport {
            interval_bytes: vec![10, 20, 30],
            ..StreamReport::default()
        };
        assert_eq!(sum_intervals(&[&a, &b]), vec![11, 22, 30]);
    }

    #[test]
    fn retransmissions_are_each_senders_last_count_summed() {
        let sample = |retrans_segments| TcpSample {
            retrans_segments,
            ..TcpSample::default()
        };
        let stream = |counts: &[u32]| StreamReport {
            samples: counts.iter().map(|&c| sample(c)).collect(),
            ..StreamReport::default()
        };
        let report = TcpTestReport {
            up: vec![stream(&[1, 4]), stream(&[])],
            down: vec![stream(&[2, 3, 7])],
            ..TcpTestReport::default()
        };
        assert_eq!(report.retransmitted_segments(), 11);
    }

    /// Samples every 100 ms from 0 to `end` tenths of a second of a sender whose data got
    /// through at 4,000 bytes per sample until `stalled` tenths and never after (the count
    /// it reached then kept); from then on it is in retransmission backoff when `backoff`
    /// (one more timeout each time its doubling timeout fires), else its receiver's
    /// window is closed (a receiver that stopped reading).
    fn stalled_sender(stalled: u64, end: u64, backoff: bool) -> Vec<TcpSample> {
        (0..=end)
            .map(|tenth| TcpSample {
                at_ns: tenth * 100_000_000,
                acked_bytes: tenth.min(stalled) * 4_000,
                unanswered_timeouts: match tenth.checked_sub(stalled) {
                    Some(since) if since > 0 && backoff => (since.ilog2() + 1) as u8,
                    _ => 0,
                },
                ..TcpSample::default()
            })
            .collect()
    }

    #[test]
    fn a_stream_silent_past_the_give_up_in_backoff_is_starved_for_its_gap() {
        // A 15 s test whose stream stalled at 5.3 s; its client gave up 10 s after the
        // test's time (the grace), at 25 s: 19.7 s without data.
        let samples = stalled_sender(53, 250, true);
        let starved = starvation(&samples, 15_000_000_000).expect("starved");
        assert_eq!(starved.gap_from_ns, 5_300_000_000);
        assert_eq!(starved.longest_gap_ns, 19_700_000_000);
        assert_eq!(starved.summary(), "starved: no data for 19.7 s");
        // Its counts: what got through, per interval of 1 s, over the test's 15 s.
        let mut stream = StreamReport {
            samples,
            ..StreamReport::default()
        };
        stream.count_acknowledged(1_000_000_000, 15_000_000_000);
        assert_eq!(stream.bytes, 212_000);
        assert_eq!(
            stream.interval_bytes,
            [36_000, 40_000, 40_000, 40_000, 40_000, 16_000]
        );
        assert_eq!(stream.receive_ns, 15_000_000_000);
        assert_eq!(stream.starved, Some(starved));
        assert!((goodput_bps(&[stream]) - 212_000.0 * 8.0 / 15.0).abs() < 1e-6);
    }

    #[test]
    fn the_longest_gap_may_be_one_the_stream_recovered_from() {
        // Silent from 2 to 9 s (7 s), then through again until a stall at 14 s that the
        // client gave up on at 20 s (6 s).
        let mut samples = stalled_sender(140, 200, true);
        for sample in &mut samples[20..90] {
            sample.acked_bytes = 80_000;
        }
        let starved = starvation(&samples, 15_000_000_000).expect("starved");
        assert_eq!(
            (starved.gap_from_ns, starved.longest_gap_ns),
            (2_000_000_000, 7_000_000_000)
        );
    }

    #[test]
    fn a_stream_in_backoff_at_the_tests_end_is_starved_though_it_got_through_after() {
        // A 30 s test whose stream stalled at 1.6 s and got through at 36 s, in the grace
        // (its starvers had ended); its client gave up at 40 s.
        let mut samples = stalled_sender(16, 400, true);
        for sample in &mut samples[360..] {
            sample.acked_bytes += 16_000;
            sample.unanswered_timeouts = 0;
        }
        let starved = starvation(&samples, 30_000_000_000).expect("starved");
        assert_eq!(
            (starved.gap_from_ns, starved.longest_gap_ns),
            (1_600_000_000, 34_400_000_000)
        );
        // Delivering at the test's end, it was not.
        assert_eq!(starvation(&samples, 36_000_000_000), None);
    }

    #[test]
    fn a_closed_window_or_a_stream_still_delivering_is_not_starved() {
        // A receiver that stopped reading (a frozen server): as silent, but answered.
        assert_eq!(
            starvation(&stalled_sender(53, 250, false), 15_000_000_000),
            None
        );
        // A stream that delivered to the end.
        assert_eq!(
            starvation(&stalled_sender(250, 250, true), 15_000_000_000),
            None
        );
        assert_eq!(starvation(&[], 0), None);
    }
}

/// A TCP test's result: every stream with the receiver's counts and the sender's samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpTestReport {
    /// Length of the per-interval counts, ns.
    pub interval_ns: u64,
    /// Streams from the client to the server.
    pub up: Vec<StreamReport>,
    /// Streams from the server to the client.
    pub down: Vec<StreamReport>,
    /// Goodput of all upward streams together, bits/s.
    pub up_bps: f64,
    /// Goodput of all downward streams together, bits/s.
    pub down_bps: f64,
    /// CPU time of the client process during the test, s.
    pub client_cpu_s: f64,
    /// CPU time of the server process during the test, s.
    pub server_cpu_s: f64,
}

impl TcpTestReport {
    /// Segments retransmitted by every stream's sender, by its last `TCP_INFO` sample.
    pub fn retransmitted_segments(&self) -> u64 {
        self.up
            .iter()
            .chain(&self.down)
            .filter_map(|s| s.samples.last())
            .map(|s| u64::from(s.retrans_segments))
            .sum()
    }

    /// The record of the starved stream with the longest gap, if a stream was starved.
    pub fn starved(&self) -> Option<Starved> {
        self.up
            .iter()
            .chain(&self.down)
            .filter_map(|s| s.starved)
            .max_by_key(|s| s.longest_gap_ns)
    }
}

/// Joins each stream's receiver view (`counts`) with its sender's samples (`sampled`), by
/// stream index.
pub fn merge_streams(counts: &[StreamReport], sampled: &[StreamReport]) -> Vec<StreamReport> {
    counts
        .iter()
        .map(|count| {
            let samples = sampled
                .iter()
                .find(|s| s.index == count.index)
                .map(|s| s.samples.clone())
                .unwrap_or_default();
            StreamReport {
                samples,
                ..count.clone()
            }
        })
        .collect()
}

/// Goodput of streams together, bits/s: all bytes over the longest receive time.
pub fn goodput_bps(streams: &[StreamReport]) -> f64 {
    let bytes: u64 = streams.iter().map(|s| s.bytes).sum();
    let ns = streams.iter().map(|s| s.receive_ns).max().unwrap_or(0);
    if ns == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / (ns as f64 * 1e-9)
    }
}

/// What an application that works in blocks moved (seed 003: Lotus Notes' 16 kB blocks,
/// each waiting for the peer's answer): a block per round trip at most, whatever the
/// window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlocksReport {
    /// Bytes per block.
    pub size: u32,
    /// Blocks answered.
    pub blocks: u64,
    /// How long it ran, ns.
    pub duration_ns: u64,
    /// Bytes of answered blocks per second, as bits.
    pub throughput_bps: f64,
    /// From writing a block to its answer, ns.
    pub block_time: crate::rtt::Percentiles,
}
