//! From the estimators' figures to one direction of a twin: the spec the emulator runs
//! and the figures, named as the twin file names them.

use std::collections::BTreeMap;

use pathlab_core::spec::{
    CodelConfig, DelayQuantiles, DelaySpec, Discipline, FixedRate, FqCodelConfig, LinkSpec,
    RateSpec, RestartSpec, TraceRef,
};
use pathlab_core::units::{BitsPerSec, PacketsPerSec, FRAME_BYTES};
use pathlab_core::{Duration, Probability};

use crate::bottleneck::PacketRate;
use crate::buffer::{Buffer, Drops};
use crate::delay::DelayVariation;
use crate::figure::Figure;
use crate::file::DirectionTwin;
use crate::isolation::Isolation;
use crate::loss::{LossFit, LossModelFit};
use crate::restart::RestartFit;

/// What the estimators found for one direction; what a gentle measurement could not
/// learn is `None`.
#[derive(Debug, Clone)]
pub struct DirectionEstimates {
    /// [`crate::delay::base_delay`], ns.
    pub base_delay_ns: Figure,
    /// Bytes of the low-load probes (their own serialization is in the base delay).
    pub probe_bytes: u32,
    /// [`crate::delay::delay_variation`].
    pub variation: Option<DelayVariation>,
    /// [`crate::loss::fit_loss`] at low load.
    pub loss: LossFit,
    /// [`crate::bottleneck::bottleneck_rate`], bits per second.
    pub rate_bps: Option<Figure>,
    /// [`crate::bottleneck::packet_rate`].
    pub packet_rate: Option<PacketRate>,
    /// [`crate::buffer::buffer`].
    pub buffer: Option<Buffer>,
    /// [`crate::isolation::isolation`]: whether the buffer keeps flows apart.
    pub isolation: Option<Isolation>,
    /// [`crate::calibrate::steady_goodput`] of a bulk TCP flow over the path, bits/s.
    pub tcp_goodput_bps: Option<Figure>,
    /// [`crate::restart::fit`]: how the path restarts after an idle spell.
    pub restart: Option<RestartFit>,
    /// The delivery trace's file name, beside the twin, when the rate moves.
    pub trace_file: Option<String>,
}

/// The spec and figures of one direction. The spec's delay is the base delay less the
/// probes' serialization at the rate found (the emulated bottleneck adds it back); its
/// variation is the measured quantiles (but beside a delivery trace); its queue the buffer found, CoDel (default
/// parameters) where drops began well below it.
pub fn direction(estimates: &DirectionEstimates) -> DirectionTwin {
    let mut figures = BTreeMap::new();
    // The probe's own time on the bottleneck, which the emulated one adds back: its bytes
    // at the rate, or a packet-rate limit's slot where that is longer.
    let bytes_ns = estimates.rate_bps.as_ref().map_or(0.0, |rate| {
        f64::from(estimates.probe_bytes) * 8.0 / rate.value * 1e9
    });
    let slot_ns = match &estimates.packet_rate {
        Some(PacketRate::Limited { pps }) => 1e9 / pps.value,
        _ => 0.0,
    };
    let serialization_ns = bytes_ns.max(slot_ns);
    let base_ns = (estimates.base_delay_ns.value - serialization_ns).max(0.0);
    let mut spec = LinkSpec {
        delay: Some(DelaySpec {
            delay: to_micros(base_ns),
            jitter: Duration::ZERO,
            correlation: Probability::ZERO,
            distribution: pathlab_core::spec::Distribution::Uniform,
        }),
        ..LinkSpec::default()
    };
    figures.insert("base_delay_ms".into(), estimates.base_delay_ns.scaled(1e-6));
    if let Some(variation) = &estimates.variation {
        let quantiles: Vec<Duration> = variation
            .values_ns()
            .iter()
            .map(|&ns| to_micros(ns))
            .collect();
        // Not beside a delivery trace: where the rate moves, the low load's delays are
        // mostly its waits for the rate's next opportunity, which the trace replays.
        let traced = estimates.trace_file.is_some();
        if quantiles.len() >= 2 && quantiles.last() > quantiles.first() && !traced {
            spec.delay_quantiles = Some(DelayQuantiles { quantiles });
        }
        for (name, q) in [
            ("delay_variation_p50_ms", 0.5),
            ("delay_variation_p99_ms", 0.99),
        ] {
            if let Some(point) = variation.quantiles.iter().find(|p| (p.q - q).abs() < 1e-9) {
                let mut how = variation.how.clone();
                if traced {
                    how.push_str(
                        "; not replayed: the rate moves, and its delivery trace makes the \
                         waits for its opportunities itself",
                    );
                }
                let figure = Figure::new(point.value_ns, point.low_ns, point.high_ns, how);
                figures.insert(name.into(), figure.scaled(1e-6));
            }
        }
    }
    spec.loss = estimates.loss.to_spec();
    figures.insert("loss_percent".into(), estimates.loss.rate.scaled(100.0));
    if let LossModelFit::GilbertElliott {
        p,
        r,
        loss_in_bad,
        loss_in_good,
    } = &estimates.loss.model
    {
        for (name, figure) in [
            ("loss_p_percent", p),
            ("loss_r_percent", r),
            ("loss_in_bad_percent", loss_in_bad),
            ("loss_in_good_percent", loss_in_good),
        ] {
            figures.insert(name.into(), figure.scaled(100.0));
        }
    }
    bottleneck(estimates, &mut spec, &mut figures);
    DirectionTwin { spec, figures }
}

/// The least ring a twin writes, ns: below it, what the sparse flow waited is timing
/// noise.
const MIN_RING_NS: f64 = 500_000.0;

/// A time in ns as a spec says it, to the microsecond (timestamps are no finer).
fn to_micros(ns: f64) -> Duration {
    Duration::from_micros((ns.max(0.0) / 1e3).round() as u64)
}

/// The rate (fixed, or the trace), the packet rate, the queue.
fn bottleneck(
    estimates: &DirectionEstimates,
    spec: &mut LinkSpec,
    figures: &mut BTreeMap<String, Figure>,
) {
    if let Some(goodput) = &estimates.tcp_goodput_bps {
        figures.insert("tcp_goodput_mbit".into(), goodput.scaled(1e-6));
    }
    if let Some(rate) = &estimates.rate_bps {
        figures.insert("rate_mbit".into(), rate.scaled(1e-6));
        spec.rate = Some(match &estimates.trace_file {
            Some(path) => RateSpec::Trace(TraceRef {
                path: path.clone(),
                trace: None,
            }),
            None => RateSpec::Fixed(FixedRate {
                // To the kbit/s: the interval is wider than that.
                rate: BitsPerSec((rate.value / 1e3).round() as u64 * 1000),
                packet_overhead: 0,
                cell_size: 0,
                cell_overhead: 0,
            }),
        });
        if let (Some(restart), None) = (&estimates.restart, &estimates.trace_file) {
            figures.insert("restart_from_percent".into(), restart.from.scaled(100.0));
            figures.insert("restart_ramp_ms".into(), restart.ramp_s.scaled(1e3));
            spec.restart = Some(RestartSpec {
                // To the percent and the millisecond: the grid is no finer.
                from: (restart.from.value * 100.0).round().clamp(1.0, 100.0) / 100.0,
                ramp: Duration::from_millis((restart.ramp_s.value * 1e3).round() as u64),
                idle: RestartSpec::DEFAULT_IDLE,
            });
        }
    }
    if let Some(PacketRate::Limited { pps }) = &estimates.packet_rate {
        figures.insert("packet_rate_pps".into(), pps.clone());
        spec.packet_rate = Some(PacketsPerSec(pps.value.round().clamp(1.0, 1e9) as u32));
    }
    if let Some(buffer) = &estimates.buffer {
        figures.insert("buffer_delay_ms".into(), buffer.delay_ns.scaled(1e-6));
        figures.insert("buffer_bytes".into(), buffer.bytes.clone());
        figures.insert("buffer_packets".into(), buffer.packets.clone());
        // In bytes, as measured (the plateau's delay times the rate): a packet count
        // would hold fewer full frames beside small packets than the buffer copied (a
        // ping's beside bulk TCP took 5 of tbf's 44 frames' worth, which then dropped at
        // 59,576 bytes of its 67,620: 7% lower round trips under load; issue 41).
        spec.queue.limit_bytes = Some(buffer.bytes.value.round().max(1.0) as u64);
        if let Drops::Aqm { onset_delay_ns } | Drops::TailDrop { onset_delay_ns } = buffer.drops {
            let how = "relative delay of the last packet before the first drop the queue made";
            let onset = Figure::new(onset_delay_ns, onset_delay_ns, onset_delay_ns, how);
            figures.insert("drop_onset_ms".into(), onset.scaled(1e-6));
        }
        if matches!(buffer.drops, Drops::Aqm { .. }) {
            spec.queue.discipline = Discipline::Codel(CodelConfig::default());
        }
    }
    if let Some(isolation) = &estimates.isolation {
        let how = format!(
            "{}: {}",
            isolation.sparse_delay_ns.how,
            if isolation.isolated {
                "well below, flows have queues of their own"
            } else {
                "one queue for both"
            }
        );
        let figure = Figure {
            how,
            ..isolation.sparse_delay_ns.clone()
        };
        figures.insert("sparse_flow_delay_ms".into(), figure.scaled(1e-6));
        // A flow-queueing scheduler: fq_codel, the one pathlab has (its CoDel drops
        // early, as the AQMs a scheduler like this one runs with do). What the sparse flow
        // waited beyond the full-size frame in service (half of one at its median: what a
        // flow-queueing scheduler's sparse flow waits for at most), which fq_codel
        // gives it too, was a queue below the scheduler that every flow shares: the twin's
        // ring.
        if isolation.isolated {
            spec.queue.discipline = Discipline::FqCodel(FqCodelConfig::default());
            let frame_ns = estimates
                .rate_bps
                .as_ref()
                .map_or(0.0, |rate| FRAME_BYTES * 8.0 / rate.value * 1e9);
            let ring_ns = isolation.sparse_delay_ns.value - frame_ns / 2.0;
            if ring_ns >= MIN_RING_NS {
                spec.queue.ring = Some(to_micros(ring_ns));
            }
        }
    }
}
