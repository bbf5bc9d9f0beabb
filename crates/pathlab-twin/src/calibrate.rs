//! A bulk TCP flow over the path, against what the twin's rate would carry it at: where the
//! path carried TCP faster than its probes' rate predicts, the twin's rate is raised so that
//! TCP goes as fast on the twin (Pantheon's calibrated emulators, USENIX ATC 2018: a path
//! of a few parameters fitted so that congestion control performs there as on the real
//! path).
//!
//! The probes measure the bottleneck in their own frames (UDP, full size). A path that
//! carries a TCP segment for less than its frame's size (a tunnel that compresses TCP/IP
//! headers, as pathlab's bond does, or a link-layer header compressor) delivers more TCP
//! payload than that rate x MSS / frame: through the bond over three lines bulk TCP down
//! carried 98-102% of the probes' rate, the twin's link 95% (its goodput 3-8% low,
//! 2026-12-07). The opposite (TCP slower than the rate carries it) is TCP's own doing on
//! the path (its loss, its buffer, its window), which the twin reproduces from those
//! figures: the rate is not lowered for it.

use serde::{Deserialize, Serialize};

use crate::figure::Figure;
use crate::stats::batch_half_width;

/// A bulk TCP transfer over the path, as its receiver counted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpRun {
    /// The counting interval, ns.
    pub interval_ns: u64,
    /// Bytes received in each interval, in order (the last may be partial).
    pub interval_bytes: Vec<u64>,
    /// The sender's maximum segment size, bytes of payload.
    pub mss: u32,
    /// Bytes a full segment counts at the bottleneck, as the probes' frames count theirs
    /// (the path's MTU and the Ethernet header).
    pub frame_bytes: u32,
    /// The sender's smoothed round trip over the flow, in order: which intervals had a
    /// queue at the bottleneck (the restart's fit).
    #[serde(default)]
    pub rtt_samples: Vec<RttSample>,
}

/// One sample of the sender's `TCP_INFO` during the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RttSample {
    /// When, ns from the flow's start.
    pub at_ns: u64,
    /// The smoothed round trip then, us.
    pub srtt_us: u32,
    /// Segments the sender had retransmitted by then.
    #[serde(default)]
    pub retransmitted: u32,
}

/// How long the bulk TCP flow runs, s: the bond's lines ramp for 1-2 s, the rest is the
/// steady goodput ([`STEADY_SHARE`]).
pub const TCP_SECONDS: u64 = 5;

/// The flow's counting interval, ms.
pub const INTERVAL_MS: u64 = 250;

/// The share of the transfer's whole intervals, at its end, that its steady goodput is
/// taken from: the first half is its ramp (slow start, a tunnel's line controllers).
pub const STEADY_SHARE: f64 = 0.5;

/// TCP's goodput above what the rate carries it at by more than this share: the path
/// carries TCP more cheaply than the probes. Below it, the run's own spread (a tbf path's
/// bulk TCP came within 1% of rate x MSS / frame).
pub const CARRIES_MORE: f64 = 0.02;

/// The least whole intervals in the steady stretch.
const MIN_STEADY_INTERVALS: usize = 4;

/// The transfer's goodput at its end, bits/s of payload: the last [`STEADY_SHARE`] of its
/// whole intervals (the last interval, partial, left out), with a batch-means interval
/// over them. `None` with fewer than [`MIN_STEADY_INTERVALS`] there.
pub fn steady_goodput(run: &TcpRun) -> Option<Figure> {
    let whole = &run.interval_bytes[..run.interval_bytes.len().saturating_sub(1)];
    let steady = &whole[whole.len() - (whole.len() as f64 * STEADY_SHARE) as usize..];
    if steady.len() < MIN_STEADY_INTERVALS || run.interval_ns == 0 {
        return None;
    }
    let seconds = run.interval_ns as f64 * 1e-9;
    let rates: Vec<f64> = steady.iter().map(|&b| b as f64 * 8.0 / seconds).collect();
    let value = rates.iter().sum::<f64>() / rates.len() as f64;
    let half = batch_half_width(&rates).unwrap_or(value);
    Some(Figure::new(
        value,
        value - half,
        value + half,
        format!(
            "goodput of a bulk TCP flow over its last {} intervals of {} ms (of {}), as its \
             receiver counted; batch-means interval",
            steady.len(),
            run.interval_ns / 1_000_000,
            whole.len()
        ),
    ))
}

/// The rate raised so that a TCP flow carries `goodput` over it, when `goodput` came more
/// than [`CARRIES_MORE`] above what `rate` carries a flow of `run`'s segments at (rate x
/// MSS / frame); `None` otherwise (the rate stands).
pub fn calibrated_rate(rate: &Figure, goodput: &Figure, run: &TcpRun) -> Option<Figure> {
    if run.mss == 0 || run.frame_bytes < run.mss {
        return None;
    }
    let payload_share = f64::from(run.mss) / f64::from(run.frame_bytes);
    let carried = rate.value * payload_share;
    if goodput.value <= (1.0 + CARRIES_MORE) * carried {
        return None;
    }
    let raised = goodput.scaled(1.0 / payload_share);
    Some(Figure {
        how: format!(
            "raised from {:.3} Mbit/s ({}) so that bulk TCP goes as fast as it went on the path: \
             {:.3} Mbit/s of goodput where that rate carries {:.3} ({} of {} bytes a frame), \
             {:+.1}%: the path carries TCP's segments for less than their frames (compressed \
             headers); the {}",
            rate.value / 1e6,
            rate.how,
            goodput.value / 1e6,
            carried / 1e6,
            run.mss,
            run.frame_bytes,
            (goodput.value / carried - 1.0) * 100.0,
            goodput.how
        ),
        ..raised
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transfer of `intervals` 250 ms intervals whose first half ramps and whose second
    /// carries `bps` with the given jitter, the last interval partial.
    fn run(bps: f64, intervals: usize, jitter: f64) -> TcpRun {
        let per = bps / 8.0 * 0.25;
        let mut interval_bytes: Vec<u64> = (0..intervals)
            .map(|i| {
                let ramp = if i < intervals / 2 {
                    (i + 1) as f64 / (intervals / 2 + 1) as f64
                } else {
                    1.0
                };
                let wobble = if i % 2 == 0 {
                    1.0 + jitter
                } else {
                    1.0 - jitter
                };
                (per * ramp * wobble) as u64
            })
            .collect();
        interval_bytes.push((per * 0.3) as u64);
        TcpRun {
            interval_ns: 250_000_000,
            interval_bytes,
            mss: 1448,
            frame_bytes: 1514,
            rtt_samples: Vec::new(),
        }
    }

    fn rate(bps: f64) -> Figure {
        Figure::new(bps, 0.99 * bps, 1.01 * bps, "probes")
    }

    #[test]
    fn the_steady_goodput_is_the_transfers_end_without_its_ramp_or_its_partial_interval() {
        let goodput = steady_goodput(&run(30e6, 20, 0.02)).unwrap();
        assert!((goodput.value - 30e6).abs() < 1e3, "{goodput:?}");
        assert!(goodput.low < 30e6 && goodput.high > 30e6, "{goodput:?}");
        assert!(goodput.how.contains("last 10 intervals of 250 ms (of 20)"));
        assert!(
            steady_goodput(&run(30e6, 6, 0.0)).is_none(),
            "3 steady intervals"
        );
    }

    #[test]
    fn a_path_that_carries_tcp_as_its_frames_say_keeps_its_rate() {
        // TCP at rate x 1448/1514, and up to 2% above it: the rate stands.
        for share in [0.9, 1.0, 1.019] {
            let tcp = run(36e6 * 1448.0 / 1514.0 * share, 20, 0.01);
            let goodput = steady_goodput(&tcp).unwrap();
            assert_eq!(
                calibrated_rate(&rate(36e6), &goodput, &tcp),
                None,
                "{share}"
            );
        }
    }

    #[test]
    fn a_path_that_carries_tcp_faster_gets_the_rate_tcp_met() {
        // The bond down: the probes' frames at 36.3 Mbit/s, bulk TCP at 36.8 of goodput.
        let tcp = run(36.8e6, 20, 0.01);
        let goodput = steady_goodput(&tcp).unwrap();
        let raised = calibrated_rate(&rate(36.3e6), &goodput, &tcp).unwrap();
        // On the twin TCP then carries raised x 1448/1514: the path's goodput.
        let carried = raised.value * 1448.0 / 1514.0;
        assert!((carried / 36.8e6 - 1.0).abs() < 1e-6, "{raised:?}");
        assert!(raised.low < raised.value && raised.high > raised.value);
        assert!(
            raised.how.contains("raised from 36.300 Mbit/s"),
            "{}",
            raised.how
        );
    }
}
