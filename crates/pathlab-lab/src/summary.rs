//! Figures a run is judged by, next to their theory.

use pathlab_core::spec::LossSpec;
use pathlab_core::units::{FRAME_BYTES, MSS_BYTES};
use pathlab_core::LinkSpec;
use pathlab_results::lab::{mathis_bps, LabRun, PathTheory};

use std::path::Path;

use pathlab_core::time::Duration;
use pathlab_core::verdict::DropReason;
use pathlab_results::recording::read_recording;

use crate::spec::{first_hops, Experiment, Workload, WorkloadKind};

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
        // Correlation keeps the mean (see docs/spec.md).
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
    path_figures(experiment, workload).map(|(theory, _)| theory)
}

/// [`path_theory`], and the bottleneck's hop (link index, crossed from `a` to `b`).
fn path_figures(
    experiment: &Experiment,
    workload: &Workload,
) -> Option<(PathTheory, Option<(usize, bool)>)> {
    // Reached at another address (through a tunnel), the path is not the lab's routes.
    if workload.address.is_some() {
        return None;
    }
    let to = workload.to?;
    let hops = path(experiment, workload.from, to);
    let mut base_rtt_s = 0.0;
    let mut bottleneck: Option<(f64, u32, (usize, bool))> = None;
    let mut delivered = Some(1.0);
    let mut varying = false;
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
        // Full-size frames' rate: the line's less its per-packet overhead, or the packet
        // rate where that binds first.
        match there.frame_rate_bps(FRAME_BYTES) {
            Some(rate) if bottleneck.is_none_or(|(slowest, _, _)| rate < slowest) => {
                bottleneck = Some((rate, there.queue.effective_limit_packets(), (link, forward)));
            }
            // A rate that changes (schedule, trace) has no one bottleneck to judge by.
            None if there.has_bottleneck() => varying = true,
            Some(_) | None => {}
        }
    }
    let bottleneck = bottleneck.filter(|_| !varying);
    let loss = delivered.map(|d| 1.0 - d);
    let sawtooth_period_s = bottleneck.map(|(rate, queue, _)| {
        let c = rate / (FRAME_BYTES * 8.0);
        let r0 = base_rtt_s + 1.0 / c;
        let w = c * r0 + f64::from(queue);
        // Round trips of R0 while the window fits the pipe, of w / C once it queues.
        let pipe = c * r0;
        let flat = (pipe - w / 2.0).max(0.0) * r0;
        let from = (w / 2.0).max(pipe);
        flat + (w * w - from * from) / (2.0 * c) + w / c
    });
    let theory = PathTheory {
        base_rtt_s,
        bottleneck_bps: bottleneck.map(|(rate, _, _)| rate),
        queue_packets: bottleneck.map(|(_, queue, _)| queue),
        sawtooth_period_s,
        plateau_rtt_s: bottleneck
            .map(|(rate, queue, _)| base_rtt_s + f64::from(queue) * FRAME_BYTES * 8.0 / rate),
        loss,
        mathis_bps: loss
            .filter(|&p| p > 0.0 && base_rtt_s > 0.0)
            .map(|p| mathis_bps(MSS_BYTES, base_rtt_s, p)),
    };
    Some((theory, bottleneck.map(|(_, _, hop)| hop)))
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
    /// Which clock timed the round trips.
    pub timed_by: pathlab_probe::rtt::RoundTripClocks,
}

/// The RTT and ping workloads of a run, summarized.
pub fn rtt_summaries(experiment: &Experiment, run: &LabRun) -> Vec<RttSummary> {
    let mut out = Vec::new();
    for (workload, result) in experiment.workloads.iter().zip(&run.workloads) {
        let Some(trips) = result.outcome.round_trips() else {
            continue;
        };
        out.push(RttSummary {
            name: workload.name.clone(),
            p50_s: trips.rtt.p50_ns as f64 * 1e-9,
            p99_s: trips.rtt.p99_ns as f64 * 1e-9,
            plateau_s: trips.plateau_s().unwrap_or(f64::NAN),
            theory: path_theory(experiment, workload),
            timed_by: trips.timed_by,
        });
    }
    out
}

/// How often a TCP workload's bottleneck queue overflowed, from the emulator's truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Sawtooth {
    /// The workload.
    pub name: String,
    /// The bottleneck link, `A-B`.
    pub link: String,
    /// Overflow episodes after the first (slow start's), whose spacing is measured.
    pub cycles: usize,
    /// Median time between the starts of those episodes, seconds.
    pub period_s: f64,
    /// One Reno flow's period ([`PathTheory::sawtooth_period_s`]).
    pub theory_s: Option<f64>,
}

/// The queue oscillation of every TCP workload whose path has a fixed-rate bottleneck and
/// whose recording (in `dir`) shows at least two overflows after slow start's: the seed's
/// "period of the queue length". Drops closer together than the full queue's RTT belong to
/// one episode.
pub fn sawtooths(experiment: &Experiment, run: &LabRun, dir: &Path) -> Vec<Sawtooth> {
    let mut out = Vec::new();
    for workload in &experiment.workloads {
        if !matches!(workload.kind, WorkloadKind::Tcp { .. }) {
            continue;
        }
        let Some((theory, Some((link, forward)))) = path_figures(experiment, workload) else {
            continue;
        };
        let Some(recording) = run
            .links
            .get(link)
            .and_then(|l| l.recording.as_ref())
            .and_then(|file| std::fs::File::open(dir.join(file)).ok())
            .and_then(|file| read_recording(std::io::BufReader::new(file)).ok())
        else {
            continue;
        };
        let gap = Duration::from_secs_f64(theory.plateau_rtt_s.unwrap_or(theory.base_rtt_s));
        let episodes = recording.drop_episodes(u8::from(!forward), DropReason::QueueFull, gap);
        if episodes.len() < 4 {
            continue;
        }
        let mut gaps: Vec<f64> = episodes[1..]
            .windows(2)
            .map(|w| (w[1].0 - w[0].0).as_secs_f64())
            .collect();
        gaps.sort_by(f64::total_cmp);
        out.push(Sawtooth {
            name: workload.name.clone(),
            link: experiment.links[link].name.clone(),
            cycles: gaps.len(),
            period_s: pathlab_core::quantile::of_sorted(&gaps, 0.5)
                .expect("four episodes leave at least two gaps"),
            theory_s: theory.sawtooth_period_s,
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
        let points = expand(recipe("bufferbloat").unwrap(), false).unwrap();
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
        // C = 825.6 packets/s, R0 = 21.2 ms, W = 17.5 + 100: (117.5^2 - 58.8^2) / 2C +
        // W / C = 6.27 + 0.14 s.
        let period = theory.sawtooth_period_s.unwrap();
        assert!((period - 6.41).abs() < 0.01, "{period}");
    }

    #[test]
    fn a_packet_rate_that_binds_first_is_the_bottleneck_of_full_frames() {
        let points = expand(recipe("bufferbloat").unwrap(), false).unwrap();
        let text = points[2].text.replace("rate 10mbit", "rate 10mbit pps 500");
        assert_ne!(
            text, points[2].text,
            "the recipe's bottleneck is rate 10mbit"
        );
        let e = Experiment::parse(&text).unwrap();
        let theory = path_theory(&e, &e.workloads[1]).expect("a peer");
        // 500 frames of 1514 B a second: 6.056 Mbit/s, under the line's 10.
        assert_eq!(theory.bottleneck_bps, Some(500.0 * 1514.0 * 8.0));
        // A full queue of 100 frames drains in 100 / 500 s.
        let plateau = theory.plateau_rtt_s.unwrap();
        assert!((plateau - (0.020 + 0.2)).abs() < 1e-9, "{theory:?}");
    }

    #[test]
    fn a_changing_rate_has_no_plateau_and_loss_gives_the_mathis_bound() {
        let points = expand(recipe("aqm").unwrap(), false).unwrap();
        let e = Experiment::parse(&points[0].text).unwrap();
        let theory = path_theory(&e, &e.workloads[1]).expect("a peer");
        assert_eq!((theory.bottleneck_bps, theory.plateau_rtt_s), (None, None));
        let lossy = points[0]
            .text
            .replace(
                "spec = \"delay 5ms rate 100mbit limit 100\"",
                "spec = \"delay 5ms loss 1%\"",
            )
            .replace(
                "schedule 10s 100mbit 10mbit 1mbit 50mbit 1mbit 100mbit ",
                "loss 1% ",
            );
        let e = Experiment::parse(&lossy).unwrap();
        let theory = path_theory(&e, &e.workloads[0]).expect("a peer");
        // Two hops of 1%: 1 - 0.99^2.
        assert!((theory.loss.unwrap() - 0.0199).abs() < 1e-12, "{theory:?}");
        // 1448 B x 8 / 20 ms x sqrt(1.5) / sqrt(0.0199) = 5.03 Mbit/s.
        let mathis = 1448.0 * 8.0 / 0.020 * 1.5f64.sqrt() / 0.0199f64.sqrt();
        assert!((theory.mathis_bps.unwrap() / mathis - 1.0).abs() < 1e-12);
        assert!((mathis - 5.03e6).abs() < 0.01e6, "{mathis}");
    }
}
