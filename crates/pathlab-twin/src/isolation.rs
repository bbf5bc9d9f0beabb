//! Whether the queue in front of the bottleneck keeps flows apart.
//!
//! While a saturating phase holds the buffer full, a sparse flow of small probes (a second
//! session: its own ports, so its own flow to any flow-queueing scheduler) crosses the
//! same path. In one FIFO its probes wait behind the saturating ones, the plateau's delay;
//! behind a flow-queueing scheduler (fq_codel, cake, a bonding tunnel's fair queue) they
//! are served in their turn and wait little. The share of the plateau they waited tells
//! the two apart; what they did wait is a figure of its own (a queue shared behind the
//! fair one, as a bond's lines are, which one flow-queueing link does not copy).

use pathlab_core::quantile;
use serde::{Deserialize, Serialize};

use crate::figure::Figure;
use crate::queued::steady_run;
use crate::samples::{Clocks, Sample};
use crate::stats::quantile_interval;

/// A sparse flow that waited less than this share of the saturating flow's queueing delay
/// was kept apart from it.
pub const ISOLATED_SHARE: f64 = 0.25;
/// Fewest sparse probes delivered of those sent while the buffer held a queue, for a
/// verdict: a full tail-drop FIFO loses most of them (12 of 200 beside 1.5 times a 10
/// Mbit/s link with a 100-packet limit, in virtual time), and a median of a few tells
/// 120 ms from 1.
pub const MIN_SPARSE_SAMPLES: usize = 5;

/// What a sparse flow beside a saturating one saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Isolation {
    /// The sparse flow's queueing delay while the saturating flow's probes waited in the
    /// queue (its relative delay less the low-load median), ns.
    pub sparse_delay_ns: Figure,
    /// The saturating flow's own in that time, ns: its median.
    pub saturating_delay_ns: f64,
    /// Whether the queue keeps flows apart: the sparse flow waited less than
    /// [`ISOLATED_SHARE`] of what the saturating one did.
    pub isolated: bool,
}

/// The sparse flow's verdict: `saturated` the saturating phase's samples, `sparse` the
/// sparse flow's (sent at the same time, on the same clocks), `queued_ns` the relative
/// delay above which a packet waited in the queue, `low_load_median_ns` what jitter adds
/// to every packet. Judged while the queue held the saturating flow's probes, over the
/// stretch the rate is taken from ([`steady_run`]): sparse probes that arrived from the
/// first of it to the last (an AQM's queue has no flat plateau). `None` when fewer than
/// [`MIN_SPARSE_SAMPLES`] sparse probes arrived then, or none of the saturating ones
/// waited.
///
/// Not over a path's ramp: through the bond over three lines, whose line controllers ramp
/// up under load, a sparse flow judged over a whole phase that ramped waited 0.15 ms (a
/// run where the rate was taken from the phase's second half) against 5.2 ms once the
/// lines were loaded; the twin had no ring, and its loaded round trips down were 18% short
/// (2026-12-07).
pub fn isolation(
    saturated: &[Sample],
    sparse: &[Sample],
    clocks: &Clocks,
    queued_ns: f64,
    low_load_median_ns: f64,
) -> Option<Isolation> {
    let waited = steady_run(saturated, clocks, queued_ns);
    let (from, to) = (waited.first()?.0, waited.last()?.0);
    let mut saturating: Vec<f64> = waited.iter().map(|a| a.1 - low_load_median_ns).collect();
    saturating.sort_by(f64::total_cmp);
    let saturating_delay_ns = quantile::of_sorted(&saturating, 0.5)?;
    let mut waits: Vec<f64> = sparse
        .iter()
        .filter(|s| s.received_ns.is_some_and(|r| (from..=to).contains(&r)))
        .filter_map(|s| clocks.relative_ns(s))
        .map(|d| d - low_load_median_ns)
        .collect();
    if waits.len() < MIN_SPARSE_SAMPLES {
        return None;
    }
    waits.sort_by(f64::total_cmp);
    let median = quantile::of_sorted(&waits, 0.5)?;
    let (low, high) = quantile_interval(&waits, 0.5)?;
    let sparse_delay_ns = Figure::new(
        median,
        low,
        high,
        format!(
            "median queueing delay of {} sparse probes (a second flow) sent while the \
             saturating probes waited in the queue (their median {:.3} ms), less the \
             low-load median; interval from order statistics",
            waits.len(),
            saturating_delay_ns / 1e6
        ),
    );
    Some(Isolation {
        isolated: median < ISOLATED_SHARE * saturating_delay_ns,
        saturating_delay_ns,
        sparse_delay_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::delay_variation;
    use crate::testing::{at_rate, paced, spec, through_flows};
    use pathlab_core::LinkSpec;

    /// A saturating flow at 1.5 times a 10 Mbit/s bottleneck and a sparse one of 200-byte
    /// probes every 20 ms beside it, through `path`: the verdict.
    fn beside(path: &LinkSpec) -> Isolation {
        let low = through_flows(path, 1, &[paced(0, 1000, 2_000_000, 200)]);
        let clocks = Clocks::from_low_load(&low[0]).unwrap();
        let variation = delay_variation(&low[0], &clocks, 20).unwrap();
        let median = variation.quantiles[10].value_ns;
        let queued_ns = variation.quantiles.last().unwrap().value_ns + 100_000.0;
        let start = 3_000_000_000;
        let flows = through_flows(
            path,
            2,
            &[
                at_rate(start, 4_000_000_000, 15e6, 1500),
                paced(start, 200, 20_000_000, 200),
            ],
        );
        isolation(&flows[0], &flows[1], &clocks, queued_ns, median).unwrap_or_else(|| {
            let got = flows[1].iter().filter(|s| s.received_ns.is_some()).count();
            panic!("{path}: {got} sparse probes arrived")
        })
    }

    #[test]
    fn a_fifo_makes_the_sparse_flow_wait_behind_the_saturating_one() {
        for text in [
            "delay 10ms rate 10mbit limit 100",
            "delay 10ms rate 10mbit limit 150kb queue codel",
        ] {
            let verdict = beside(&spec(text));
            let (wait, theirs) = (verdict.sparse_delay_ns.value, verdict.saturating_delay_ns);
            assert!(!verdict.isolated, "{text}: {verdict:?}");
            // Tens of frames (1.2 ms each) at least: those that found room waited behind
            // what was there (52 of the saturating probes' 121 ms in the 100-packet FIFO).
            assert!(wait > 10e6, "{text}: {wait} of {theirs}");
        }
    }

    #[test]
    fn a_flow_queue_lets_the_sparse_flow_pass_within_a_frame_or_two() {
        let verdict = beside(&spec("delay 10ms rate 10mbit limit 150kb queue fq_codel"));
        let wait = verdict.sparse_delay_ns.value;
        assert!(verdict.isolated, "{verdict:?}");
        // One 1500-byte frame at 10 Mbit/s is 1.2 ms: the sparse probe waits at most for
        // the frame being sent and its own turn.
        assert!(wait < 2.5e6, "{wait} ns");
    }

    /// A path that ramps through the phase (8 Mbit/s for 2.6 s, then 10: the rate is its
    /// second half's) with no queue below its scheduler at first and 5 ms of one once
    /// loaded (the bond's lines): the sparse flow is judged where the rate is.
    #[test]
    fn the_sparse_flow_is_judged_where_the_rate_is_taken_not_over_a_ramp() {
        let low: Vec<Sample> = (0..1000)
            .map(|i| Sample {
                seq: i,
                sent_ns: i * 2_000_000,
                len_bytes: 242,
                received_ns: Some(i * 2_000_000 + 10_000_000),
            })
            .collect();
        let clocks = Clocks::from_low_load(&low).unwrap();
        let start = 3_000_000_000;
        let mut saturated = Vec::new();
        let mut arrived = start + 60_000_000;
        for i in 0..3000u64 {
            let pace = if arrived < start + 2_660_000_000 {
                1_500_000
            } else {
                1_200_000
            };
            arrived += pace;
            saturated.push(Sample {
                seq: i,
                sent_ns: start + i * 900_000,
                len_bytes: 1500,
                received_ns: Some(arrived),
            });
        }
        let sparse: Vec<Sample> = (0..200)
            .map(|i| {
                let sent = start + i * 20_000_000;
                let waited = if sent < start + 2_600_000_000 {
                    100_000
                } else {
                    5_000_000
                };
                Sample {
                    seq: i,
                    sent_ns: sent,
                    len_bytes: 242,
                    received_ns: Some(sent + 10_000_000 + waited),
                }
            })
            .collect();
        let verdict = isolation(&saturated, &sparse, &clocks, 100_000.0, 0.0).unwrap();
        let wait = verdict.sparse_delay_ns.value;
        assert!((wait - 5e6).abs() < 0.1e6, "{verdict:?}");
        assert!(verdict.isolated, "{verdict:?}");
    }

    #[test]
    fn too_few_sparse_probes_during_the_plateau_give_no_verdict() {
        let path = spec("delay 10ms rate 10mbit limit 100");
        let low = through_flows(&path, 1, &[paced(0, 1000, 2_000_000, 200)]);
        let clocks = Clocks::from_low_load(&low[0]).unwrap();
        let start = 3_000_000_000;
        let flows = through_flows(
            &path,
            2,
            &[
                at_rate(start, 4_000_000_000, 15e6, 1500),
                paced(start + 10_000_000_000, 50, 20_000_000, 200),
            ],
        );
        assert_eq!(
            isolation(&flows[0], &flows[1], &clocks, 100_000.0, 0.0),
            None
        );
        // No saturating probe waited (nor did the path hold them back: the sparse flow's).
        assert_eq!(
            isolation(&flows[1], &flows[1], &clocks, f64::MAX, 0.0),
            None
        );
    }
}
