//! Loss and its burstiness: a bare rate when losses come independently, else a
//! Gilbert-Elliott fit (`p`, `r`, and the loss in each state) with confidence intervals,
//! which `pathlab-core`'s `loss gemodel` replays.
//!
//! # The tests that choose the model
//!
//! The packets' fates in order (lost or not) are counted in pairs. Independent losses make
//! a loss as likely after a loss as after a delivery (their run lengths follow a geometric
//! law); a likelihood-ratio test of that against a two-state Markov chain on the fates
//! ([`BURSTY_THRESHOLD`], chi-square with 1 degree of freedom at 1%) says whether the
//! losses come in bursts. The chain on the fates is exactly the simple Gilbert model (a
//! loss is the bad state: `loss_in_bad = 1`, `loss_in_good = 0`), whose `p` and `r` are
//! then two binomial proportions, each with its Wilson interval. A second test, of
//! whether the fate two packets back still matters once the last one is known
//! ([`HIDDEN_THRESHOLD`], chi-square with 2 degrees of freedom at 1%), says whether
//! the bad state also delivers packets or the good one loses some: then the full model's
//! four parameters are fitted as a hidden Markov chain by Baum-Welch (EM), each with a
//! batch-means interval from fits on ten consecutive stretches of the run.
//!
//! The chain is the one `pathlab-core` runs (`stage/loss.rs`): per packet, first the
//! transition, then a loss with the new state's probability; it starts good.

use pathlab_core::spec::{Chance, LossSpec};
use pathlab_core::Probability;
use serde::{Deserialize, Serialize};

use crate::figure::Figure;
use crate::stats::{batch_half_width, wilson, BATCHES};

/// Chi-square (1 degree of freedom) at 1%: above it, losses are not independent.
pub const BURSTY_THRESHOLD: f64 = 6.635;

/// Chi-square (2 degrees of freedom) at 1%: above it, the simple Gilbert chain does not
/// explain the fates, and a hidden state is fitted.
pub const HIDDEN_THRESHOLD: f64 = 9.210;

/// The loss model a run of fates supports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "model")]
pub enum LossModelFit {
    /// No packet was lost: the interval bounds the rate.
    None {
        /// The loss rate (0) and its interval.
        rate: Figure,
    },
    /// Independent losses at a rate.
    Random {
        /// The loss rate.
        rate: Figure,
    },
    /// Gilbert-Elliott: losses in bursts.
    GilbertElliott {
        /// Good to bad, per packet.
        p: Figure,
        /// Bad to good, per packet.
        r: Figure,
        /// Loss probability in the bad state.
        loss_in_bad: Figure,
        /// Loss probability in the good state.
        loss_in_good: Figure,
    },
}

/// What a run of fates says about loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossFit {
    /// Packets judged.
    pub packets: u64,
    /// Packets lost.
    pub lost: u64,
    /// The loss rate, whatever the model.
    pub rate: Figure,
    /// The burstiness test's statistic (see [`BURSTY_THRESHOLD`]).
    pub bursty_statistic: f64,
    /// The hidden-state test's statistic (see [`HIDDEN_THRESHOLD`]).
    pub hidden_statistic: f64,
    /// The model chosen, with its parameters.
    pub model: LossModelFit,
}

impl LossFit {
    /// The loss as a spec's `loss` says it (`None`: no loss seen).
    pub fn to_spec(&self) -> Option<LossSpec> {
        let probability =
            |f: &Figure| Probability::new(f.value.clamp(0.0, 1.0)).expect("in [0, 1]");
        match &self.model {
            LossModelFit::None { .. } => None,
            LossModelFit::Random { rate } => Some(LossSpec::Random(Chance {
                probability: probability(rate),
                correlation: Probability::ZERO,
            })),
            LossModelFit::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            } => Some(LossSpec::GilbertElliott {
                p: probability(p),
                r: probability(r),
                loss_in_bad: probability(loss_in_bad),
                loss_in_good: probability(loss_in_good),
            }),
        }
    }
}

/// `x ln(x / expected)`, 0 when `x` is 0.
fn g_term(observed: f64, expected: f64) -> f64 {
    if observed > 0.0 {
        observed * (observed / expected).ln()
    } else {
        0.0
    }
}

/// The G statistic of a contingency table (rows: contexts; columns: delivered, lost):
/// twice the log-likelihood ratio of "the fate depends on the row" against "it does not".
fn g_statistic(rows: &[[u64; 2]]) -> f64 {
    let total: u64 = rows.iter().map(|r| r[0] + r[1]).sum();
    if total == 0 {
        return 0.0;
    }
    let columns = [
        rows.iter().map(|r| r[0]).sum::<u64>() as f64,
        rows.iter().map(|r| r[1]).sum::<u64>() as f64,
    ];
    let mut g = 0.0;
    for row in rows {
        let row_total = (row[0] + row[1]) as f64;
        for (column, &count) in row.iter().enumerate() {
            let expected = row_total * columns[column] / total as f64;
            g += g_term(count as f64, expected);
        }
    }
    2.0 * g
}

/// Fits the loss of a run from its packets' fates in sending order (`true`: lost).
pub fn fit_loss(lost: &[bool]) -> LossFit {
    let packets = lost.len() as u64;
    let lost_count = lost.iter().filter(|&&l| l).count() as u64;
    let (low, high) = wilson(lost_count, packets);
    let rate_value = lost_count as f64 / packets.max(1) as f64;
    let how = format!("{lost_count} of {packets} packets lost at low load; Wilson interval");
    let rate = Figure::new(rate_value, low, high, how);
    // Fates after a delivery and after a loss; then after (delivery, delivery) and
    // (loss, delivery).
    let mut after = [[0u64; 2]; 2];
    let mut after_two = [[0u64; 2]; 2];
    for window in lost.windows(2) {
        after[usize::from(window[0])][usize::from(window[1])] += 1;
    }
    for window in lost.windows(3) {
        if !window[1] {
            after_two[usize::from(window[0])][usize::from(window[2])] += 1;
        }
    }
    let bursty_statistic = g_statistic(&after);
    let hidden_statistic = g_statistic(&after_two) + {
        // And after a loss: (delivery, loss) against (loss, loss).
        let mut after_loss = [[0u64; 2]; 2];
        for window in lost.windows(3) {
            if window[1] {
                after_loss[usize::from(window[0])][usize::from(window[2])] += 1;
            }
        }
        g_statistic(&after_loss)
    };
    let model = if lost_count == 0 {
        LossModelFit::None { rate: rate.clone() }
    } else if bursty_statistic <= BURSTY_THRESHOLD {
        LossModelFit::Random { rate: rate.clone() }
    } else if hidden_statistic <= HIDDEN_THRESHOLD {
        gilbert(after)
    } else {
        hidden_gilbert_elliott(lost, after)
    };
    LossFit {
        packets,
        lost: lost_count,
        rate,
        bursty_statistic,
        hidden_statistic,
        model,
    }
}

/// The simple Gilbert chain from the pair counts: `p` = losses after a delivery, `r` =
/// deliveries after a loss.
fn gilbert(after: [[u64; 2]; 2]) -> LossModelFit {
    let proportion = |hits: u64, of: u64, what: &str| {
        let (low, high) = wilson(hits, of);
        Figure::new(
            hits as f64 / of.max(1) as f64,
            low,
            high,
            format!("{hits} of {of} packets {what}; Wilson interval"),
        )
    };
    LossModelFit::GilbertElliott {
        p: proportion(
            after[0][1],
            after[0][0] + after[0][1],
            "lost after a delivery",
        ),
        r: proportion(
            after[1][0],
            after[1][0] + after[1][1],
            "delivered after a loss",
        ),
        loss_in_bad: Figure::new(
            1.0,
            1.0,
            1.0,
            "simple Gilbert: every packet in a burst is lost (the fates' chain explains the runs)",
        ),
        loss_in_good: Figure::new(
            0.0,
            0.0,
            0.0,
            "simple Gilbert: no loss outside a burst (the fates' chain explains the runs)",
        ),
    }
}

/// Parameters of the two-state hidden chain: `[p, r, loss_in_bad, loss_in_good]`.
type Parameters = [f64; 4];

/// One Baum-Welch pass (scaled forward-backward, Rabiner 1989) over `lost`: the
/// re-estimated parameters and the log-likelihood of the old ones.
fn baum_welch_step(lost: &[bool], theta: Parameters) -> (Parameters, f64) {
    let [p, r, bad_loss, good_loss] = theta;
    let transition = [[1.0 - p, p], [r, 1.0 - r]];
    let emit = |state: usize, l: bool| {
        let loss = if state == 1 { bad_loss } else { good_loss };
        if l {
            loss
        } else {
            1.0 - loss
        }
    };
    let n = lost.len();
    let mut alpha = vec![[0.0f64; 2]; n];
    let mut scale = vec![0.0f64; n];
    let mut previous = [1.0, 0.0];
    for (t, &l) in lost.iter().enumerate() {
        let mut a = [0.0; 2];
        for j in 0..2 {
            a[j] = (previous[0] * transition[0][j] + previous[1] * transition[1][j]) * emit(j, l);
        }
        let c = (a[0] + a[1]).max(f64::MIN_POSITIVE);
        scale[t] = c;
        alpha[t] = [a[0] / c, a[1] / c];
        previous = alpha[t];
    }
    let log_likelihood: f64 = scale.iter().map(|c| c.ln()).sum();
    let mut beta = [1.0, 1.0];
    let mut transitions = [[0.0f64; 2]; 2];
    let mut occupancy = [[0.0f64; 2]; 2]; // [state][delivered, lost]
    for t in (0..n).rev() {
        let gamma = [alpha[t][0] * beta[0], alpha[t][1] * beta[1]];
        let total = (gamma[0] + gamma[1]).max(f64::MIN_POSITIVE);
        for (state, g) in gamma.iter().enumerate() {
            occupancy[state][usize::from(lost[t])] += g / total;
        }
        let weighted = [beta[0] * emit(0, lost[t]), beta[1] * emit(1, lost[t])];
        if t > 0 {
            for i in 0..2 {
                for j in 0..2 {
                    transitions[i][j] +=
                        alpha[t - 1][i] * transition[i][j] * weighted[j] / scale[t];
                }
            }
        }
        beta = [
            (transition[0][0] * weighted[0] + transition[0][1] * weighted[1]) / scale[t],
            (transition[1][0] * weighted[0] + transition[1][1] * weighted[1]) / scale[t],
        ];
    }
    let ratio = |a: f64, b: f64| if a + b > 0.0 { a / (a + b) } else { 0.0 };
    let next = [
        ratio(transitions[0][1], transitions[0][0]),
        ratio(transitions[1][0], transitions[1][1]),
        ratio(occupancy[1][1], occupancy[1][0]),
        ratio(occupancy[0][1], occupancy[0][0]),
    ];
    (next, log_likelihood)
}

/// Baum-Welch from `start` until the log-likelihood gains less than 1e-6 (at most 500
/// passes); the bad state is the one that loses more.
fn baum_welch(lost: &[bool], start: Parameters) -> Parameters {
    let mut theta = start;
    let mut last = f64::NEG_INFINITY;
    for _ in 0..500 {
        let (next, log_likelihood) = baum_welch_step(lost, theta);
        theta = next;
        if log_likelihood - last < 1e-6 {
            break;
        }
        last = log_likelihood;
    }
    if theta[3] > theta[2] {
        theta = [theta[1], theta[0], theta[3], theta[2]];
    }
    theta
}

/// The full model by Baum-Welch, started from the simple Gilbert chain, each parameter's
/// interval by batch means over ten stretches fitted alike.
fn hidden_gilbert_elliott(lost: &[bool], after: [[u64; 2]; 2]) -> LossModelFit {
    let share = |a: u64, b: u64| a as f64 / (a + b).max(1) as f64;
    let start = [
        share(after[0][1], after[0][0]).max(1e-4),
        share(after[1][0], after[1][1]).max(1e-2),
        0.9,
        0.001,
    ];
    let theta = baum_welch(lost, start);
    let stretch = lost.len() / BATCHES;
    let batches: Vec<Parameters> = (0..BATCHES)
        .map(|i| baum_welch(&lost[i * stretch..(i + 1) * stretch], theta))
        .collect();
    let names = ["p", "r", "loss in the bad state", "loss in the good state"];
    let figures: Vec<Figure> = (0..4)
        .map(|k| {
            let estimates: Vec<f64> = batches.iter().map(|b| b[k]).collect();
            let half = batch_half_width(&estimates).unwrap_or(1.0);
            Figure::new(
                theta[k],
                (theta[k] - half).max(0.0),
                (theta[k] + half).min(1.0),
                format!(
                    "{}: Baum-Welch fit of a hidden two-state chain to {} fates; batch-means \
                     interval over {BATCHES} stretches",
                    names[k],
                    lost.len()
                ),
            )
        })
        .collect();
    let [p, r, loss_in_bad, loss_in_good]: [Figure; 4] =
        figures.try_into().expect("four parameters");
    LossModelFit::GilbertElliott {
        p,
        r,
        loss_in_bad,
        loss_in_good,
    }
}

#[cfg(test)]
mod tests;
