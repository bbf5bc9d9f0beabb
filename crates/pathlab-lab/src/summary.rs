//! Figures a run is judged by, next to their theory.

use pathlab_core::spec::RateSpec;
use pathlab_core::LinkSpec;
use pathlab_results::lab::{LabOutcome, LabRun};

use crate::spec::{first_hops, Experiment, Workload};

/// Bytes of a full-size Ethernet frame (what a bottleneck queue holds when TCP fills it).
const FRAME_BYTES: f64 = 1514.0;

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

/// What queueing theory says a probe between a workload's ends sees when a bulk flow
/// keeps the bottleneck's queue full.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueTheory {
    /// Sum of the path's delays, both ways, seconds.
    pub base_s: f64,
    /// The slowest fixed rate on the way there, bits per second.
    pub rate_bps: f64,
    /// Its queue's limit, packets.
    pub queue_packets: u32,
    /// base + queue x 1514 B x 8 / rate, seconds.
    pub plateau_s: f64,
}

/// The theory for `workload`'s path (as the run starts), if it has a fixed-rate bottleneck.
pub fn queue_theory(experiment: &Experiment, workload: &Workload) -> Option<QueueTheory> {
    let to = workload.to?;
    let hops = path(experiment, workload.from, to);
    let mut base_s = 0.0;
    let mut bottleneck: Option<(f64, u32)> = None;
    for &(link, forward) in &hops {
        let l = &experiment.links[link];
        let (there, back) = if forward {
            (&l.forward, &l.reverse)
        } else {
            (&l.reverse, &l.forward)
        };
        base_s += delay_s(there) + delay_s(back);
        if let Some(RateSpec::Fixed(fixed)) = &there.rate {
            let rate = fixed.rate.as_f64();
            if bottleneck.is_none_or(|(slowest, _)| rate < slowest) {
                bottleneck = Some((rate, there.queue.effective_limit_packets()));
            }
        }
    }
    let (rate_bps, queue_packets) = bottleneck?;
    Some(QueueTheory {
        base_s,
        rate_bps,
        queue_packets,
        plateau_s: base_s + f64::from(queue_packets) * FRAME_BYTES * 8.0 / rate_bps,
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
    /// What theory says the plateau is, if the path has a bottleneck.
    pub theory: Option<QueueTheory>,
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
            theory: queue_theory(experiment, workload),
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
        let theory = queue_theory(&e, probes).expect("a bottleneck");
        assert!((theory.base_s - 0.020).abs() < 1e-12);
        assert_eq!((theory.rate_bps, theory.queue_packets), (10e6, 100));
        // 20 ms + 100 x 1514 x 8 / 10e6 = 20 + 121.12 ms.
        assert!((theory.plateau_s - 0.14112).abs() < 1e-9, "{theory:?}");
    }
}
