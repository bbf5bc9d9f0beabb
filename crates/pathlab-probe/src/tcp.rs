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
