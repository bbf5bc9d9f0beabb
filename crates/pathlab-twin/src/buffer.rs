//! The buffer in front of the bottleneck and how it drops.
//!
//! Its size is the queueing delay a saturating phase reaches times the rate (Flexlab's
//! queue size: the largest queueing delay seen times the capacity): the delay of the
//! packets on the plateau, less what low-load jitter adds to every packet. How it drops
//! comes from the delay at which drops begin: a tail-drop queue drops only once full, at
//! the plateau; an AQM (CoDel, PIE, RED) begins at a delay well below it.

use pathlab_core::quantile;
use serde::{Deserialize, Serialize};

use crate::figure::Figure;
use crate::samples::{Clocks, Sample};
use crate::stats::quantile_interval;

/// The saturating phase's delays' quantile taken as the plateau's top.
pub const PLATEAU_QUANTILE: f64 = 0.9;

/// Drops that begin below this share of the plateau's delay are an AQM's.
pub const AQM_ONSET_SHARE: f64 = 0.5;

/// How the buffer drops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Drops {
    /// The saturating phase lost nothing to the queue: the buffer is at least the plateau.
    None,
    /// Drops began at the plateau: the queue drops arrivals when full.
    TailDrop {
        /// Relative delay when drops began, ns.
        onset_delay_ns: f64,
    },
    /// Drops began well below the plateau: an AQM.
    Aqm {
        /// Relative delay when drops began, ns.
        onset_delay_ns: f64,
    },
}

/// The buffer in front of the bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Buffer {
    /// The queueing delay of a full buffer, ns.
    pub delay_ns: Figure,
    /// Its size in bytes: the delay times the rate.
    pub bytes: Figure,
    /// Its size in packets of the phase's size.
    pub packets: Figure,
    /// How it drops.
    pub drops: Drops,
}

/// The buffer from a phase that overfed the bottleneck: `rate_bps` its rate,
/// `low_load_median_ns` the low-load variation's median (what jitter adds to a packet),
/// `random_loss` the low-load loss rate (losses the queue did not cause). `None` if no
/// packet arrived.
pub fn buffer(
    saturated: &[Sample],
    clocks: &Clocks,
    rate_bps: &Figure,
    low_load_median_ns: f64,
    random_loss: f64,
) -> Option<Buffer> {
    let mut delays: Vec<f64> = saturated
        .iter()
        .filter_map(|s| clocks.relative_ns(s))
        .collect();
    delays.sort_by(f64::total_cmp);
    // The plateau's top is the delays' 90th percentile, not their highest: a few packets
    // held up past the queue (a late timestamp, an emulator's late moment: 8-15 ms above
    // a tbf's 52 ms on a busy machine) made the plateau those few, and the buffer 14% and
    // 28% too large (2026-12-07). Not the 99th either: with a busy loop on each core more
    // than 1% were (the plateau 88 packets at 58.8 ms of a tbf's 51-52, the twin's loaded
    // round trips down +23%, 2026-12-07); a full FIFO holds most of a phase's packets.
    let top = quantile::of_sorted(&delays, PLATEAU_QUANTILE)?;
    delays.retain(|&d| d >= 0.9 * top);
    let median = quantile::of_sorted(&delays, 0.5)? - low_load_median_ns;
    let (low, high) = quantile_interval(&delays, 0.5)?;
    let delay_ns = Figure::new(
        median,
        low - low_load_median_ns,
        high - low_load_median_ns,
        format!(
            "median queueing delay of the {} packets on the plateau of a saturating phase \
             (within 10% of its 90th percentile or above), less the low-load median; interval \
             from order statistics",
            delays.len()
        ),
    );
    let frame_bytes = saturated
        .iter()
        .map(|s| f64::from(s.len_bytes))
        .sum::<f64>()
        / saturated.len() as f64;
    let bytes = Figure::new(
        delay_ns.value * 1e-9 * rate_bps.value / 8.0,
        delay_ns.low * 1e-9 * rate_bps.low / 8.0,
        delay_ns.high * 1e-9 * rate_bps.high / 8.0,
        "the plateau's queueing delay times the bottleneck's rate",
    );
    let packets = bytes.scaled(1.0 / frame_bytes);
    let packets = Figure {
        how: format!("the buffer's bytes over {frame_bytes:.0}-byte frames"),
        ..packets
    };
    let drops = drops(
        saturated,
        clocks,
        delay_ns.value + low_load_median_ns,
        random_loss,
    );
    Some(Buffer {
        delay_ns,
        bytes,
        packets,
        drops,
    })
}

/// When drops began: each loss is placed at the relative delay of the last packet that
/// arrived before it (in sending order); as many of the lowest as random loss explains
/// (its expected count plus two standard deviations) are set aside, and the next is the
/// onset. Below [`AQM_ONSET_SHARE`] of the plateau, an AQM.
fn drops(saturated: &[Sample], clocks: &Clocks, plateau_ns: f64, random_loss: f64) -> Drops {
    let mut ordered: Vec<&Sample> = saturated.iter().collect();
    ordered.sort_by_key(|s| s.seq);
    let mut last_delay = 0.0;
    let mut at_loss = Vec::new();
    for sample in ordered {
        match clocks.relative_ns(sample) {
            Some(delay) => last_delay = delay,
            None => at_loss.push(last_delay),
        }
    }
    at_loss.sort_by(f64::total_cmp);
    let expected = random_loss * saturated.len() as f64;
    let explained = (expected + 2.0 * expected.sqrt()).ceil() as usize;
    let Some(&onset_delay_ns) = at_loss.get(explained) else {
        return Drops::None;
    };
    if onset_delay_ns < AQM_ONSET_SHARE * plateau_ns {
        Drops::Aqm { onset_delay_ns }
    } else {
        Drops::TailDrop { onset_delay_ns }
    }
}
