//! A path's check runs of known figures, made with the probes' own analyses, for tests of
//! what reads them (the verdict here, the report's overlays in `pathlab-results`).

use pathlab_probe::control::{Direction, ReceivedProbe, SendLateness};
use pathlab_probe::owd::{one_way_result, SenderReport};
use pathlab_probe::rtt::{analyse, RoundTrip};
use pathlab_probe::tcp::{StreamReport, TcpSample, TcpTestReport};

use super::{DirectionRuns, PathRuns};

/// What a synthetic path does: its base RTT, what bulk TCP gets through, the queue it
/// builds under it, and one probe in `loss_every` lost.
#[derive(Debug, Clone, Copy)]
pub struct Synthetic {
    /// The least round trip, ms.
    pub base_rtt_ms: f64,
    /// Bulk TCP's goodput, bits/s, steady from its start.
    pub goodput_bps: f64,
    /// The queue bulk TCP builds, ms: the round trips beside it ramp from none to this.
    pub queue_ms: f64,
    /// One paced probe in this many is lost (0: none).
    pub loss_every: u64,
}

/// The transfer and the round trips beside it last this long, s; the idle test and the
/// probes half of it.
pub const SECONDS: u64 = 4;
/// `TCP_INFO` is sampled this often, ns.
const SAMPLE_NS: u64 = 100_000_000;
/// Round trips are sent this often, ns.
const RTT_EVERY_NS: u64 = 10_000_000;
/// Probes are sent this often, ns.
const PROBE_EVERY_NS: u64 = 5_000_000;

impl Synthetic {
    /// The runs of a check on this path.
    pub fn runs(&self) -> PathRuns {
        PathRuns {
            idle: self.round_trips(SECONDS / 2, 0.0),
            up: self.direction(Direction::Up),
            down: self.direction(Direction::Down),
        }
    }

    fn direction(&self, direction: Direction) -> DirectionRuns {
        DirectionRuns {
            tcp: self.bulk(),
            up: true,
            rtt: self.round_trips(SECONDS, self.queue_ms),
            owd: self.probes(direction),
        }
    }

    /// One upward stream acknowledging `goodput_bps` steadily, sampled every 100 ms, its
    /// receiver counting per second.
    fn bulk(&self) -> TcpTestReport {
        let bytes_per_ns = self.goodput_bps / 8e9;
        let samples = (1..=SECONDS * 1_000_000_000 / SAMPLE_NS)
            .map(|i| TcpSample {
                at_ns: i * SAMPLE_NS,
                acked_bytes: ((i * SAMPLE_NS) as f64 * bytes_per_ns) as u64,
                mss: 1448,
                ..TcpSample::default()
            })
            .collect();
        let per_second = (bytes_per_ns * 1e9) as u64;
        TcpTestReport {
            interval_ns: 1_000_000_000,
            up: vec![StreamReport {
                index: 0,
                interval_bytes: vec![per_second; SECONDS as usize],
                bytes: per_second * SECONDS,
                receive_ns: SECONDS * 1_000_000_000,
                samples,
                starved: None,
            }],
            up_bps: self.goodput_bps,
            ..TcpTestReport::default()
        }
    }

    /// Round trips every 10 ms for `seconds`: the base plus a queue ramping to `queue_ms`.
    fn round_trips(&self, seconds: u64, queue_ms: f64) -> pathlab_probe::rtt::RttReport {
        let count = seconds * 1_000_000_000 / RTT_EVERY_NS;
        let replies: Vec<RoundTrip> = (0..count)
            .map(|seq| {
                let sent_ns = seq * RTT_EVERY_NS;
                let rtt_ms = self.base_rtt_ms + queue_ms * seq as f64 / count as f64;
                let rtt_ns = (rtt_ms * 1e6) as u64;
                RoundTrip {
                    seq,
                    sent_ns,
                    reflector_received_ns: sent_ns + rtt_ns / 2,
                    reflector_sent_ns: sent_ns + rtt_ns / 2,
                    received_ns: sent_ns + rtt_ns,
                    timed_by: pathlab_probe::rtt::TimedBy::Kernel,
                }
            })
            .collect();
        analyse(&replies, count, count, 0, &vec![0; count as usize])
    }

    /// Probes every 5 ms for half the time, their delay above the least varying by up to
    /// 1.2 ms, one in `loss_every` lost.
    fn probes(&self, direction: Direction) -> pathlab_probe::owd::OneWayResult {
        let sent = SECONDS / 2 * 1_000_000_000 / PROBE_EVERY_NS;
        let base_ns = (self.base_rtt_ms * 5e5) as u64;
        let arrivals: Vec<ReceivedProbe> = (0..sent)
            .filter(|seq| self.loss_every == 0 || seq % self.loss_every != self.loss_every - 1)
            .map(|seq| ReceivedProbe {
                seq,
                sent_ns: seq * PROBE_EVERY_NS,
                received_ns: seq * PROBE_EVERY_NS + base_ns + (seq % 7) * 200_000,
            })
            .collect();
        let sender = SenderReport {
            direction,
            rate_bps: 200 * 8 * 1_000_000_000 / PROBE_EVERY_NS,
            size: 200,
            sent,
            duration_ns: (sent - 1) * PROBE_EVERY_NS,
            late: SendLateness::default(),
        };
        one_way_result(sender, &arrivals, 0, 0, 100)
    }
}
