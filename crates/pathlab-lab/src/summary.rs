//! Figures a run is judged by, next to their theory.

use pathlab_core::spec::{LossSpec, RateSpec};
use pathlab_core::units::{FRAME_BYTES, MSS_BYTES};
use pathlab_core::LinkSpec;
use pathlab_results::lab::{mathis_bps, LabOutcome, LabRun, PathTheory};

use crate::spec::{first_hops, Experiment, Workload};

/// The links (index, whether crossed from `a` to `b`) on the fewest-hops path.
fn path(experiment: &Experiment, from: usize, to: usize) -> Vec<(usize, bool)> {
    let mut out = Vec::new();
    let mut node = from;
    while node != to {
        let Some(link) = first_hops(&experiment.links, experiment.nodes.len(), node)[to] else {
            return Vec::new();
        };
        let l = &experiment.links[link];
        let forward = l.a == node;
        out.push((link, forward));
        node = if forward { l.b } else { l.a };
    }
    out
}

fn delay_s(spec: &LinkSpec) -> f64 {
    spec.delay.map_or(0.0, |d| d.delay.as_secs_f64())
}

/// The long-run loss probability of a direction, if its model has a fixed mean.
fn loss_probability(spec: &LinkSpec) -> Option<f64> {
    match spec.loss {
        None => Some(0.0),
        // Correlation keeps the mean (see the README).
        Some(LossSpec::Random(chance)) => Some(chance.probability.get()),
        Some(LossSpec::GilbertElliott {
            p,
            r,
            loss_in_bad,
            loss_in_good,
        }) => {
            let (p, r) = (p.get(), r.get());
            if p + r == 0.0 {
                return None;
            }
            Some((p * loss_in_bad.get() + r * loss_in_good.get()) / (p + r))
        }
        Some(LossSpec::State { .. }) => None,
    }
}

/// What the specs (as the run starts) say about `workload`'s path: base RTT, bottleneck,
/// the RTT of a full bottleneck queue, loss on the way there and the Mathis bound.
pub fn path_theory(experiment: &Experiment, workload: &Workload) -> Option<PathTheory> {
    let to = workload.to?;
    let hops = path(experiment, workload.from, to);
    let mut base_rtt_s = 0.0;
    let mut bottleneck: Option<(f64, u32)> = None;
    let mut delivered = Some(1.0);
    for &(link, forward) in &hops {
        let l = &experiment.links[link];
        let (there, back) = if forward {
            (&l.forward, &l.reverse)
        } else {
            (&l.reverse, &l.forward)
        };
        base_rtt_s += delay_s(there) + delay_s(back);
        delivered = delivered
            .zip(loss_probability(there))
            .map(|(d, p)| d * (1.0 - p));
        if let Some(RateSpec::Fixed(fixed)) = &there.rate {
            let rate = fixed.rate.as_f64();
            if bottleneck.is_none_or(|(slowest, _)| rate < slowest) {
                bottleneck = Some((rate, there.queue.effective_limit_packets()));
            }
        }
    }
    let loss = delivered.map(|d| 1.0 - d);
    Some(PathTheory {
        base_rtt_s,
        bottleneck_bps: bottleneck.map(|(rate, _)| rate),
        queue_packets: bottleneck.map(|(_, queue)| queue),
        plateau_rtt_s: bottleneck
            .map(|(rate, queue)| base_rtt_s + f64::from(queue) * FRAME_BYTES * 8.0 / rate),
        loss,
        mathis_bps: loss
            .filter(|&p| p > 0.0 && base_rtt_s > 0.0)
            .map(|p| mathis_bps(MSS_BYTES, base_rtt_s, p)),
    })
}

/// An RTT workload's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct RttSummary {
    /// The workload.
    pub name: String,
    /// Median RTT over the whole run, seconds.
    pub p50_s: f64,
    /// 99th percentile, seconds.
    pub p99_s: f64,
    /// The plateau: the 99th percentile of the second half (after the queue filled), s.
    pub plateau_s: f64,
    /// What theory says about the path.
    pub theory: Option<PathTheory>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The RTT workloads of a run, summarized.
pub fn rtt_summaries(experiment: &Experiment, run: &LabRun) -> Vec<RttSummary> {
    let mut out = Vec::new();
    for (workload, result) in experiment.workloads.iter().zip(&run.workloads) {
        let LabOutcome::Rtt(report) = &result.outcome else {
            continue;
        };
        let mut all: Vec<f64> = report
            .series
            .iter()
            .map(|&(_, ns)| ns as f64 * 1e-9)
            .collect();
        let half = report.sent / 2;
        let mut late: Vec<f64> = report
            .series
            .iter()
            .filter(|&&(seq, _)| seq >= half)
            .map(|&(_, ns)| ns as f64 * 1e-9)
            .collect();
        all.sort_by(f64::total_cmp);
        late.sort_by(f64::total_cmp);
        out.push(RttSummary {
            name: workload.name.clone(),
            p50_s: percentile(&all, 0.5),
            p99_s: percentile(&all, 0.99),
            plateau_s: percentile(&late, 0.99),
            theory: path_theory(experiment, workload),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipes::recipe;
    use crate::spec::expand;

    #[test]
    fn the_bufferbloat_recipes_theory_is_base_plus_a_full_queue() {
        let points = expand(recipe("bufferbloat").unwrap()).unwrap();
        let e = Experiment::parse(&points[2].text).unwrap();
        let probes = &e.workloads[1];
        let theory = path_theory(&e, probes).expect("a peer");
        assert!((theory.base_rtt_s - 0.020).abs() < 1e-12);
        assert_eq!(
            (theory.bottleneck_bps, theory.queue_packets),
            (Some(10e6), Some(100))
        );
        // 20 ms + 100 x 1514 x 8 / 10e6 = 20 + 121.12 ms.
        let plateau = theory.plateau_rtt_s.unwrap();
        assert!((plateau - 0.14112).abs() < 1e-9, "{theory:?}");
        assert_eq!((theory.loss, theory.mathis_bps), (Some(0.0), None));
    }
}
