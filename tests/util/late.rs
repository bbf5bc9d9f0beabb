//! The emulator's own lateness as part of a timing test's tolerance (STYLE.md rule 19,
//! issue 43).
//!
//! A packet leaves the emulator at its model departure plus the emulator's lateness (how
//! long the kernel held the frame before the emulator read it, and how late its thread
//! woke to send). The recording is in model time; what a program sees is not. So a test
//! that compares a program's figure with theory or with the recording adds what the
//! emulator measured of itself during that very test, per crossing, instead of a margin
//! chosen once on an idle machine.
//!
//! When the emulator was later than the test can absorb, the test cannot tell a wrong
//! figure from a late emulator: it fails, naming the emulator's figure and its own limit.
//! No test passes without judging, and none runs again until it passes.

use std::path::Path;
use std::time::Duration;

use pathlab_emulator::emulator::{EmulatorStats, LatenessSummary};
use pathlab_emulator::fidelity::EXPOSED_EDGES_NS;

/// Which figure of a direction's lateness a bound takes: the one that matches what the
/// test judges (a median against p50, "all but 1 in 100" against p99, every packet
/// against the largest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantile {
    /// The mean (a mean of many packets, as a smoothed RTT is): from the stats' sum.
    Mean,
    /// The median.
    P50,
    /// The 99th percentile.
    P99,
    /// The largest.
    #[allow(dead_code)] // no test judges every packet yet
    Max,
}

impl Quantile {
    fn name(self) -> &'static str {
        match self {
            Quantile::Mean => "mean",
            Quantile::P50 => "p50",
            Quantile::P99 => "p99",
            Quantile::Max => "max",
        }
    }
}

/// What one direction of an emulator measured of its own timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectionLateness {
    /// `r-h1 -> r-h2` (emulator stats) or `h1 -> h2` (a lab's result).
    pub name: String,
    /// Packets sent.
    pub packets: u64,
    /// Mean lateness, ns (`None` from a lab's result, which keeps no sum).
    pub mean_ns: Option<u64>,
    /// Median lateness, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
    /// The 99th percentile of how long frames waited in the kernel before the emulator
    /// read them, ns (part of the lateness; `None` from a lab's result).
    pub waited_p99_ns: Option<u64>,
    /// Frames the kernel dropped because the emulator did not read them in time: they
    /// never reached the model, so the recording does not know them (`None` from a lab's
    /// result).
    pub ring_full: Option<u64>,
}

impl DirectionLateness {
    /// Its lateness at `quantile`, ns.
    pub fn at(&self, quantile: Quantile) -> u64 {
        match quantile {
            Quantile::Mean => self.mean_ns.unwrap_or_else(|| {
                panic!(
                    "{}: no mean lateness here (a lab's result keeps p50, p99 and max)",
                    self.name
                )
            }),
            Quantile::P50 => self.p50_ns,
            Quantile::P99 => self.p99_ns,
            Quantile::Max => self.max_ns,
        }
    }
}

/// What an emulator measured of its own timing, direction by direction (index 0: first
/// port to second, or a lab link's A to B; 1: back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lateness {
    /// The emulator's name, for messages.
    pub emulator: String,
    /// Its directions.
    pub directions: Vec<DirectionLateness>,
}

impl Lateness {
    /// From an emulator's stats (`pathlab emulate stats -J`, or its final stats): read
    /// them after the traffic the test judges has crossed.
    pub fn of_stats(stats: &EmulatorStats) -> Lateness {
        Lateness {
            emulator: stats.name.clone(),
            directions: stats
                .directions
                .iter()
                .map(|d| DirectionLateness {
                    name: format!("{} -> {}", d.from, d.to),
                    packets: d.lateness.packets,
                    mean_ns: Some(
                        d.lateness
                            .sum_ns
                            .checked_div(d.lateness.packets)
                            .unwrap_or(0),
                    ),
                    p50_ns: d.lateness.p50_ns,
                    p99_ns: d.lateness.p99_ns,
                    max_ns: d.lateness.max_ns,
                    waited_p99_ns: Some(d.waited.p99_ns),
                    ring_full: Some(d.ring_full),
                })
                .collect(),
        }
    }

    /// What an emulator measured of its own timing between two readings of its stats:
    /// `before`, then `after` the traffic a test judges, so that a long load before it
    /// (`twin`'s saturating phases) does not count. The quantiles come from the counts of
    /// the coarse histogram the stats carry ([`EXPOSED_EDGES_NS`]): each is the edge it
    /// lies under (a bound, never below it, at most 2.5 times it), the largest edge's
    /// beyond it the largest of the emulator's life; the mean is exact.
    pub fn between(before: &EmulatorStats, after: &EmulatorStats) -> Lateness {
        let quantile = |before: &LatenessSummary, after: &LatenessSummary, q: f64| {
            let packets = after.packets.saturating_sub(before.packets);
            let wanted = (q * packets as f64).ceil() as u64;
            EXPOSED_EDGES_NS
                .iter()
                .zip(after.at_most.iter().zip(&before.at_most))
                .find(|(_, (after, before))| after.saturating_sub(**before) >= wanted)
                .map_or(after.max_ns, |(&edge, _)| edge)
        };
        let directions = after
            .directions
            .iter()
            .zip(&before.directions)
            .map(|(a, b)| {
                let packets = a.lateness.packets.saturating_sub(b.lateness.packets);
                DirectionLateness {
                    name: format!("{} -> {}", a.from, a.to),
                    packets,
                    mean_ns: Some(
                        a.lateness
                            .sum_ns
                            .saturating_sub(b.lateness.sum_ns)
                            .checked_div(packets)
                            .unwrap_or(0),
                    ),
                    p50_ns: quantile(&b.lateness, &a.lateness, 0.5),
                    p99_ns: quantile(&b.lateness, &a.lateness, 0.99),
                    max_ns: a.lateness.max_ns,
                    waited_p99_ns: Some(quantile(&b.waited, &a.waited, 0.99)),
                    ring_full: Some(a.ring_full.saturating_sub(b.ring_full)),
                }
            })
            .collect();
        Lateness {
            emulator: format!("{} (between two readings)", after.name),
            directions,
        }
    }

    /// From a lab run's `result.json`: link `link`'s (`h1-h2`) `lateness`, A to B then B
    /// to A.
    pub fn of_lab_link(result_json: &Path, link: &str) -> Lateness {
        let text = std::fs::read_to_string(result_json)
            .unwrap_or_else(|e| panic!("{}: {e}", result_json.display()));
        let value: serde_json::Value = serde_json::from_str(&text).expect("result.json is JSON");
        let links = value
            .pointer("/result/data/links")
            .and_then(|l| l.as_array())
            .expect("a lab result has links");
        let found = links
            .iter()
            .find(|l| l["name"] == link)
            .unwrap_or_else(|| panic!("no link {link} in {}", result_json.display()));
        let directions: Vec<DirectionLateness> = found["lateness"]
            .as_array()
            .expect("the link's lateness")
            .iter()
            .map(|d| {
                let ns = |key: &str| d[key].as_u64().unwrap_or_else(|| panic!("{key}: {d}"));
                DirectionLateness {
                    name: format!(
                        "{} -> {}",
                        d["from"].as_str().unwrap_or("?"),
                        d["to"].as_str().unwrap_or("?")
                    ),
                    packets: ns("packets"),
                    mean_ns: None,
                    p50_ns: ns("p50_ns"),
                    p99_ns: ns("p99_ns"),
                    max_ns: ns("max_ns"),
                    waited_p99_ns: None,
                    ring_full: None,
                }
            })
            .collect();
        assert_eq!(
            directions.len(),
            2,
            "link {link}: both directions' lateness (an emulated link)"
        );
        Lateness {
            emulator: format!("link {link}"),
            directions,
        }
    }

    /// What a median round trip through both directions carries of the emulator's own
    /// lateness: [`Lateness::slack`] at the p50, ms, the test unable to judge past 1 ms.
    pub fn round_trip_median_ms(&self) -> f64 {
        ms(self.slack(Quantile::P50, &[0, 1], Duration::from_millis(1)))
    }

    /// The slack a bound adds for a figure that crossed the emulator once through each of
    /// `crossings` (direction indices: `[0, 1]` for a round trip), each at `quantile`.
    ///
    /// Fails the test, naming the figures, when the sum exceeds `budget` (what the test
    /// can absorb and still tell a right figure from a wrong one), or when a direction it
    /// crossed lost frames before the model saw them (`ring_full`): then the test cannot
    /// judge, and says so instead of passing or failing on the emulator's account.
    pub fn slack(&self, quantile: Quantile, crossings: &[usize], budget: Duration) -> Duration {
        let mut total_ns = 0u64;
        let mut parts = Vec::new();
        for &index in crossings {
            let direction = self.direction(index);
            if let Some(lost) = direction.ring_full.filter(|&n| n > 0) {
                panic!(
                    "{} ({}): the kernel dropped {lost} frames before the emulator read them \
                     (ring_full): what crossed is not what the model says: cannot judge{}",
                    self.emulator,
                    direction.name,
                    cpu_pressure()
                );
            }
            let ns = direction.at(quantile);
            total_ns += ns;
            parts.push(format!(
                "{} {} us ({}, {} packets{})",
                quantile.name(),
                ns / 1_000,
                direction.name,
                direction.packets,
                direction
                    .waited_p99_ns
                    .map(|w| format!(", waited p99 {} us", w / 1_000))
                    .unwrap_or_default()
            ));
        }
        let slack = Duration::from_nanos(total_ns);
        assert!(
            slack <= budget,
            "{}: the emulator sent late by {}, beyond this test's {} us: cannot judge{}",
            self.emulator,
            parts.join(" + "),
            budget.as_micros(),
            cpu_pressure()
        );
        eprintln!(
            "{}: slack for the emulator's lateness {} us ({}) of this test's {} us",
            self.emulator,
            slack.as_micros(),
            parts.join(" + "),
            budget.as_micros()
        );
        slack
    }

    /// [`Lateness::slack`] for a test whose judgement is a count, not a time (drops
    /// against retransmissions, a verdict): it adds nothing to a bound, but a late
    /// emulator or frames lost before the model still leave it unable to judge.
    pub fn judgeable(&self, quantile: Quantile, crossings: &[usize], budget: Duration) {
        self.slack(quantile, crossings, budget);
    }

    /// Direction `index`.
    pub fn direction(&self, index: usize) -> &DirectionLateness {
        self.directions
            .get(index)
            .unwrap_or_else(|| panic!("{}: no direction {index}", self.emulator))
    }
}

/// How late a pinger woke against its own schedule: it sends a request every `interval`
/// from its first, so each send's delay past its turn is a wake-up of the pinger's thread
/// on this machine, now. A pinger that stamps its replies in user space (after `poll`
/// returns) carries wake-ups of the same kind in its round trips; the emulator's figures
/// do not hold them.
///
/// `sent`: (n, when the n-th request went after the first), for some or all n. Returns the
/// delays
/// at `quantile` (the largest for [`Quantile::Max`]), failing the test, as
/// [`Lateness::slack`] does, when that exceeds `budget`.
pub fn pinger_slack(
    sent: &[(usize, Duration)],
    interval: Duration,
    quantile: Quantile,
    budget: Duration,
) -> Duration {
    let mut late: Vec<Duration> = sent
        .iter()
        .map(|&(n, at)| at.saturating_sub(interval * n as u32))
        .collect();
    assert!(!late.is_empty(), "no request sent");
    late.sort_unstable();
    let at = |q: f64| late[((q * late.len() as f64).ceil() as usize).clamp(1, late.len()) - 1];
    let slack = match quantile {
        Quantile::Mean => late.iter().sum::<Duration>() / late.len() as u32,
        Quantile::P50 => at(0.5),
        Quantile::P99 => at(0.99),
        Quantile::Max => late[late.len() - 1],
    };
    assert!(
        slack <= budget,
        "the pinger woke late by {} {} us (its sends against its schedule, {} requests), \
         beyond this test's {} us: cannot judge{}",
        quantile.name(),
        slack.as_micros(),
        late.len(),
        budget.as_micros(),
        cpu_pressure()
    );
    eprintln!(
        "the pinger's own lateness: {} {} us (p50 {} us, max {} us) of this test's {} us",
        quantile.name(),
        slack.as_micros(),
        at(0.5).as_micros(),
        late[late.len() - 1].as_micros(),
        budget.as_micros()
    );
    slack
}

/// What the machine's CPUs were doing (`/proc/pressure/cpu`, where the kernel has it), for
/// a message that says the test could not judge.
pub fn cpu_pressure() -> String {
    std::fs::read_to_string("/proc/pressure/cpu")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_owned))
        .map(|some| format!(" (CPU pressure: {some})"))
        .unwrap_or_default()
}

/// Milliseconds of a duration, for the tests' arithmetic in ms.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The time some task of this machine has waited for a CPU since boot
/// (`/proc/pressure/cpu`'s `some total=`, us), where the kernel has it. Its difference over
/// a stretch of wall time is the share of that stretch the machine was short of CPU: a
/// gate that decides whether a test's timing figures are judged (bond_classes,
/// bond_rekey), never a figure judged itself; those come from kernel stamps, the
/// emulators' recordings and their measured lateness.
pub fn cpu_stall_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let some = text.lines().next()?;
    some.split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}
