//! The loss fit against `pathlab-core`'s own loss models, over many seeds: the model is
//! told right, and the true parameters fall inside the intervals at about their rate.

use super::*;
use crate::testing::{paced, spec, through};

/// The fates of `count` packets through `spec`, seeded by `seed`.
fn fates(spec_text: &str, seed: u64, count: u64) -> Vec<bool> {
    through(&spec(spec_text), seed, &paced(0, count, 1_000_000, 200))
        .iter()
        .map(|s| s.received_ns.is_none())
        .collect()
}

/// Coverage at least this over `seeds` seeds at 95% nominal: three binomial standard
/// deviations below 95%.
fn floor(seeds: usize) -> usize {
    let n = seeds as f64;
    (n * 0.95 - 3.0 * (n * 0.95 * 0.05).sqrt()).floor() as usize
}

#[test]
fn independent_losses_give_a_rate_whose_interval_covers_the_truth() {
    let seeds = 60;
    let (mut random, mut covered) = (0, 0);
    for seed in 0..seeds {
        let fit = fit_loss(&fates("loss 2%", seed, 20_000));
        random += usize::from(matches!(fit.model, LossModelFit::Random { .. }));
        covered += usize::from(fit.rate.covers(0.02));
    }
    eprintln!("random loss 2%: {random} of {seeds} told random, rate covered {covered}");
    // The burstiness test errs at 1%: 57 or more of 60 are told random.
    assert!(random >= 57, "{random}");
    assert!(covered >= floor(seeds as usize), "{covered}");
}

#[test]
fn a_gilbert_chain_is_told_bursty_and_its_p_and_r_are_covered() {
    let seeds = 60;
    let (mut simple, mut p_covered, mut r_covered) = (0, 0, 0);
    for seed in 0..seeds {
        let fit = fit_loss(&fates("loss gemodel 1% 30%", seed, 30_000));
        let LossModelFit::GilbertElliott {
            p, r, loss_in_bad, ..
        } = &fit.model
        else {
            panic!("seed {seed}: not bursty: {fit:?}");
        };
        simple += usize::from(loss_in_bad.value == 1.0);
        p_covered += usize::from(p.covers(0.01));
        r_covered += usize::from(r.covers(0.30));
        let spec = fit.to_spec().unwrap();
        assert!(matches!(spec, LossSpec::GilbertElliott { .. }));
    }
    eprintln!("gemodel 1% 30%: {simple} of {seeds} simple, p covered {p_covered}, r {r_covered}");
    assert!(simple >= 57, "{simple}");
    assert!(p_covered >= floor(seeds as usize), "{p_covered}");
    assert!(r_covered >= floor(seeds as usize), "{r_covered}");
}

#[test]
fn a_chain_that_delivers_in_bursts_is_fitted_with_its_four_parameters() {
    // Bad state loses 70%, good state 0.2%: the fates' own chain no longer explains them.
    let truth = [0.01, 0.30, 0.70, 0.002];
    let seeds = 12;
    let mut covered = [0usize; 4];
    for seed in 0..seeds {
        let fit = fit_loss(&fates("loss gemodel 1% 30% 70% 0.2%", seed, 100_000));
        let LossModelFit::GilbertElliott {
            p,
            r,
            loss_in_bad,
            loss_in_good,
        } = &fit.model
        else {
            panic!("seed {seed}: not bursty: {fit:?}");
        };
        assert!(loss_in_bad.value < 1.0, "seed {seed}: told simple: {fit:?}");
        for (k, figure) in [p, r, loss_in_bad, loss_in_good].into_iter().enumerate() {
            covered[k] += usize::from(figure.covers(truth[k]));
        }
    }
    eprintln!("gemodel 1% 30% 70% 0.2%: p, r, 1-h, 1-k covered {covered:?} of {seeds}");
    for count in covered {
        assert!(count >= floor(seeds as usize), "{covered:?}");
    }
}

#[test]
fn no_loss_is_no_loss_with_an_upper_bound() {
    let fit = fit_loss(&fates("delay 1ms", 1, 1000));
    assert!(matches!(fit.model, LossModelFit::None { .. }));
    assert!(fit.to_spec().is_none());
    // Wilson's upper bound for 0 of 1000: 0.38%.
    assert!((fit.rate.high - 0.0038).abs() < 2e-4, "{:?}", fit.rate);
}
