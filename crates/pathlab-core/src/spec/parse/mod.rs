//! The spec parser: netem's syntax as users paste it, plus pathlab's additions.
//!
//! Keywords may come in any order, each at most once (`limit` once as a packet count and
//! once as a size). Optional arguments are taken while the next token has their kind, as
//! tc does: in `delay 25ms 5ms loss 1%`, `5ms` is the jitter and `loss` the next keyword.
//!
//! `preset NAME`, first if at all, starts from a preset's spec; each keyword after it
//! replaces what that keyword sets in the preset (`delay` its whole delay line with jitter
//! and distribution, `limit` its queue limits), and leaves the rest. `distance KM` adds the
//! propagation delay of that many kilometres to `delay` (or is the delay, without one).

mod queue;

use super::units::{self, RateProblem};
use super::{distance, preset};
use super::{
    Chance, DelayQuantiles, DelaySpec, Discipline, Distribution, FixedRate, LinkSpec, LossSpec,
    RateSchedule, RateSpec, RedConfig, ReorderSpec, RestartSpec, SlotInterval, SlotSpec,
    TokenBucket, TraceRef, MAX_BURST_BYTES, MAX_DELAY_QUANTILES, MAX_RESTART_TIME,
};
use crate::time::Duration;
use crate::units::{BitsPerSec, PacketsPerSec, Probability};
pub(super) use queue::red_weight;

/// Why a link specification was rejected; every message names the token at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A keyword pathlab does not know.
    #[error("unknown keyword '{word}'{}", suggestion.as_ref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    UnknownKeyword {
        /// The word.
        word: String,
        /// The closest known keyword, if close.
        suggestion: Option<String>,
    },
    /// A token of the wrong kind after a keyword.
    #[error("expected {what} after '{after}', got '{got}'")]
    Expected {
        /// What was expected, with an example.
        what: &'static str,
        /// The keyword it follows.
        after: String,
        /// The token found.
        got: String,
    },
    /// The spec ended where an argument was needed.
    #[error("'{keyword}' needs {what}, but the spec ended")]
    Ended {
        /// The keyword.
        keyword: String,
        /// What it needs.
        what: &'static str,
    },
    /// A value outside its range.
    #[error("{what} must be {range}, got {got}")]
    OutOfRange {
        /// The quantity.
        what: String,
        /// Its allowed range.
        range: &'static str,
        /// The token found.
        got: String,
    },
    /// A rate without a unit.
    #[error("rate needs a unit like 10mbit, got '{0}'")]
    RateWithoutUnit(String),
    /// A keyword given twice.
    #[error("'{0}' is given twice")]
    Duplicate(String),
    /// Keywords that cannot be used together, or one that needs another.
    #[error("{0}")]
    Conflict(String),
    /// A preset name pathlab does not know (or `-up` of a link that is the same both ways).
    #[error("unknown preset '{name}'{}; the presets are: {valid}", suggestion.as_ref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    UnknownPreset {
        /// The name as given.
        name: String,
        /// The closest valid name, if close.
        suggestion: Option<String>,
        /// Every valid name, comma-separated.
        valid: String,
    },
}

const KEYWORDS: &[&str] = &[
    "delay",
    "distribution",
    "quantiles",
    "loss",
    "ecn",
    "duplicate",
    "corrupt",
    "reorder",
    "gap",
    "rate",
    "schedule",
    "trace",
    "pps",
    "restart",
    "slot",
    "limit",
    "queue",
    "ring",
    "mtu",
    "seed",
    "preset",
    "distance",
];

const TIME: &str = "a time like 25ms";
const PERCENT: &str = "a percentage like 1%";
const RATE: &str = "a rate like 10mbit";
const SIZE: &str = "a size like 1500 or 64kb";
const COUNT: &str = "a whole number";
const PACKET_RATE: &str = "a packet rate like 6500 or 6.5k";

/// RED's config with the options whose defaults depend on the limit: min, max, burst, weight.
type RedDraft = (
    RedConfig,
    Option<u64>,
    Option<u64>,
    Option<f64>,
    Option<f64>,
);

struct Parser<'a> {
    tokens: Vec<&'a str>,
    next: usize,
    spec: LinkSpec,
    seen: Vec<&'static str>,
    limit_packets_seen: bool,
    gap: Option<u32>,
    /// Queue options whose defaults depend on the limit: resolved at the end.
    red: Option<RedDraft>,
    /// Propagation delay from `distance`, added to the delay at the end.
    distance: Option<Duration>,
}

pub(super) fn parse(text: &str) -> Result<LinkSpec, SpecError> {
    let mut parser = Parser {
        tokens: text.split_whitespace().collect(),
        next: 0,
        spec: LinkSpec::default(),
        seen: Vec::new(),
        limit_packets_seen: false,
        gap: None,
        red: None,
        distance: None,
    };
    while let Some(word) = parser.take() {
        parser.keyword(word)?;
    }
    parser.finish()
}

fn probability(what: &str, token: &str, percent: f64) -> Result<Probability, SpecError> {
    Probability::from_percent(percent).ok_or_else(|| SpecError::OutOfRange {
        what: what.to_owned(),
        range: "between 0% and 100%",
        got: token.to_owned(),
    })
}

/// The candidate closest to `word` by edit distance, if within `max_edits`.
pub(super) fn nearest<'c>(
    word: &str,
    candidates: impl IntoIterator<Item = &'c str>,
    max_edits: usize,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= max_edits)
        .min()
        .map(|(_, c)| c.to_owned())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

impl<'a> Parser<'a> {
    fn take(&mut self) -> Option<&'a str> {
        let token = self.tokens.get(self.next).copied()?;
        self.next += 1;
        Some(token)
    }

    fn peek(&self) -> Option<&'a str> {
        self.tokens.get(self.next).copied()
    }

    /// Takes the next token if `parse` accepts it.
    fn optional<T>(&mut self, parse: impl Fn(&str) -> Option<T>) -> Option<(T, &'a str)> {
        let token = self.peek()?;
        let value = parse(token)?;
        self.next += 1;
        Some((value, token))
    }

    /// Takes the next token, which `parse` must accept.
    fn required<T>(
        &mut self,
        keyword: &str,
        what: &'static str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<(T, &'a str), SpecError> {
        let Some(token) = self.take() else {
            return Err(SpecError::Ended {
                keyword: keyword.to_owned(),
                what,
            });
        };
        parse(token)
            .map(|v| (v, token))
            .ok_or_else(|| SpecError::Expected {
                what,
                after: keyword.to_owned(),
                got: token.to_owned(),
            })
    }

    fn time(&mut self, keyword: &str) -> Result<Duration, SpecError> {
        Ok(self.required(keyword, TIME, units::time)?.0)
    }

    fn percent(&mut self, keyword: &str, what: &str) -> Result<Probability, SpecError> {
        let (value, token) = self.required(keyword, PERCENT, units::percent)?;
        probability(what, token, value)
    }

    fn optional_percent(&mut self, what: &str) -> Result<Option<Probability>, SpecError> {
        match self.optional(units::percent) {
            Some((value, token)) => probability(what, token, value).map(Some),
            None => Ok(None),
        }
    }

    fn rate(&mut self, keyword: &str) -> Result<BitsPerSec, SpecError> {
        let Some(token) = self.take() else {
            return Err(SpecError::Ended {
                keyword: keyword.to_owned(),
                what: RATE,
            });
        };
        match units::rate(token) {
            Ok(rate) => Ok(rate),
            Err(RateProblem::NoUnit) => Err(SpecError::RateWithoutUnit(token.to_owned())),
            Err(RateProblem::NotARate) => Err(SpecError::Expected {
                what: RATE,
                after: keyword.to_owned(),
                got: token.to_owned(),
            }),
        }
    }

    fn count(&mut self, keyword: &str) -> Result<u32, SpecError> {
        let (value, token) = self.required(keyword, COUNT, units::integer)?;
        u32::try_from(value).map_err(|_| SpecError::OutOfRange {
            what: format!("'{keyword}'"),
            range: "at most 4294967295",
            got: token.to_owned(),
        })
    }

    fn once(&mut self, keyword: &'static str) -> Result<(), SpecError> {
        if self.seen.contains(&keyword) {
            return Err(SpecError::Duplicate(keyword.to_owned()));
        }
        self.seen.push(keyword);
        Ok(())
    }

    fn chance(&mut self, keyword: &str) -> Result<Chance, SpecError> {
        let probability = self.percent(keyword, keyword)?;
        let correlation = self
            .optional_percent(&format!("{keyword} correlation"))?
            .unwrap_or(Probability::ZERO);
        Ok(Chance {
            probability,
            correlation,
        })
    }

    fn distribution(&mut self, keyword: &str) -> Result<Distribution, SpecError> {
        const WHAT: &str = "one of uniform, normal, pareto, paretonormal";
        let parse = |token: &str| match token {
            "uniform" => Some(Distribution::Uniform),
            "normal" => Some(Distribution::Normal),
            "pareto" => Some(Distribution::Pareto),
            "paretonormal" => Some(Distribution::ParetoNormal),
            _ => None,
        };
        Ok(self.required(keyword, WHAT, parse)?.0)
    }

    /// Parses one keyword and its arguments, handing it to the family of keywords it
    /// belongs to; a word no family knows is an unknown keyword.
    fn keyword(&mut self, word: &'a str) -> Result<(), SpecError> {
        if self.delay_keyword(word)?
            || self.impairment_keyword(word)?
            || self.rate_keyword(word)?
            || self.setup_keyword(word)?
        {
            return Ok(());
        }
        Err(SpecError::UnknownKeyword {
            word: word.to_owned(),
            suggestion: nearest(word, KEYWORDS.iter().copied(), 2),
        })
    }

    /// Parses `word` and its arguments if it is one of the keywords that set the delay
    /// (`delay`/`latency`, `distribution`, `distance`); returns false, having taken
    /// nothing, if it is not.
    fn delay_keyword(&mut self, word: &str) -> Result<bool, SpecError> {
        match word {
            "delay" | "latency" => {
                self.once("delay")?;
                let delay = self.time(word)?;
                let jitter = self
                    .optional(units::time)
                    .map_or(Duration::ZERO, |(t, _)| t);
                let correlation = if jitter.is_zero() {
                    Probability::ZERO
                } else {
                    self.optional_percent("delay correlation")?
                        .unwrap_or(Probability::ZERO)
                };
                // `distribution` may come first; a preset's is replaced with its delay line.
                let distribution = if self.seen.contains(&"distribution") {
                    self.spec.delay.map(|d| d.distribution).unwrap_or_default()
                } else {
                    Distribution::default()
                };
                self.spec.delay = Some(DelaySpec {
                    delay,
                    jitter,
                    correlation,
                    distribution,
                });
            }
            "distribution" => {
                self.once("distribution")?;
                let distribution = self.distribution(word)?;
                let delay = self.spec.delay.get_or_insert(DelaySpec {
                    delay: Duration::ZERO,
                    jitter: Duration::ZERO,
                    correlation: Probability::ZERO,
                    distribution,
                });
                delay.distribution = distribution;
            }
            "quantiles" => {
                self.once("quantiles")?;
                self.quantiles()?;
            }
            "distance" => {
                self.once("distance")?;
                let Some(token) = self.take() else {
                    return Err(SpecError::Ended {
                        keyword: word.to_owned(),
                        what: "a distance like 6000km",
                    });
                };
                self.distance = Some(distance::propagation_delay(distance::parse_km(token)?));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `quantiles T0 T1 ... TN`: 2 to [`MAX_DELAY_QUANTILES`] times, non-decreasing, up to
    /// the next token that is not a time.
    fn quantiles(&mut self) -> Result<(), SpecError> {
        let mut quantiles: Vec<Duration> = Vec::new();
        while let Some((time, token)) = self.optional(units::time) {
            if quantiles.len() == MAX_DELAY_QUANTILES {
                return Err(SpecError::OutOfRange {
                    what: "the number of 'quantiles'".into(),
                    range: "2 to 1001",
                    got: token.to_owned(),
                });
            }
            if let Some(&previous) = quantiles.last() {
                if time < previous {
                    return Err(SpecError::Conflict(format!(
                        "'quantiles' must not decrease: {token} comes after {previous}"
                    )));
                }
            }
            quantiles.push(time);
        }
        if quantiles.len() < 2 {
            return Err(SpecError::Expected {
                what: "at least two times, the 0% and 100% quantiles, like 0 2ms",
                after: "quantiles".into(),
                got: self.peek().unwrap_or("the end").to_owned(),
            });
        }
        self.spec.delay_quantiles = Some(DelayQuantiles { quantiles });
        Ok(())
    }

    /// Parses `word` and its arguments if it is one of the keywords that harm packets
    /// (`loss`/`drop`, `ecn`, `duplicate`, `corrupt`, `reorder`, `gap`); returns false,
    /// having taken nothing, if it is not.
    fn impairment_keyword(&mut self, word: &str) -> Result<bool, SpecError> {
        match word {
            "loss" | "drop" => {
                self.once("loss")?;
                self.spec.loss = Some(self.loss(word)?);
            }
            "ecn" => {
                self.once("ecn")?;
                self.spec.ecn = true;
            }
            "duplicate" => {
                self.once("duplicate")?;
                self.spec.duplicate = Some(self.chance(word)?);
            }
            "corrupt" => {
                self.once("corrupt")?;
                self.spec.corrupt = Some(self.chance(word)?);
            }
            "reorder" => {
                self.once("reorder")?;
                let chance = self.chance(word)?;
                self.spec.reorder = Some(ReorderSpec {
                    probability: chance.probability,
                    correlation: chance.correlation,
                    gap: 1,
                });
            }
            "gap" => {
                self.once("gap")?;
                let gap = self.count(word)?;
                if gap == 0 {
                    return Err(SpecError::OutOfRange {
                        what: "gap".into(),
                        range: "at least 1",
                        got: "0".into(),
                    });
                }
                self.gap = Some(gap);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Parses `word` and its arguments if it is one of the keywords that pace packets
    /// (`rate`, `schedule`, `trace`, `pps`, `slot`, and `burst`/`peakrate` out of place);
    /// returns false, having taken nothing, if it is not.
    fn rate_keyword(&mut self, word: &str) -> Result<bool, SpecError> {
        match word {
            "rate" => {
                self.rate_once()?;
                let rate = self.rate(word)?;
                let packet_overhead = self.optional(units::signed).map_or(0, |(v, _)| v);
                let cell_size = self
                    .optional(|t| units::integer(t).and_then(|v| u32::try_from(v).ok()))
                    .map_or(0, |(v, _)| v);
                let cell_overhead = if cell_size > 0 {
                    self.optional(units::signed).map_or(0, |(v, _)| v)
                } else {
                    0
                };
                self.spec.rate = Some(RateSpec::Fixed(FixedRate {
                    rate,
                    packet_overhead,
                    cell_size,
                    cell_overhead,
                }));
                self.spec.bucket = self.bucket()?;
            }
            "schedule" => {
                self.rate_once()?;
                let step = self.time(word)?;
                if step.is_zero() {
                    return Err(SpecError::OutOfRange {
                        what: "the schedule step".into(),
                        range: "longer than zero",
                        got: "0".into(),
                    });
                }
                let mut rates = vec![self.rate(word)?];
                while let Some((rate, _)) = self.optional(|t| units::rate(t).ok()) {
                    rates.push(rate);
                }
                let repeat = self.optional(|t| (t == "loop").then_some(())).is_some();
                self.spec.bucket = None;
                self.spec.rate = Some(RateSpec::Schedule(RateSchedule {
                    step,
                    rates,
                    repeat,
                }));
            }
            "trace" => {
                self.rate_once()?;
                let (path, _) = self.required(word, "a trace file name", |t| Some(t.to_owned()))?;
                self.spec.bucket = None;
                self.spec.rate = Some(RateSpec::Trace(TraceRef { path, trace: None }));
            }
            "pps" => {
                self.once("pps")?;
                self.spec.packet_rate = Some(self.packet_rate(word)?);
            }
            "restart" => {
                self.once("restart")?;
                self.spec.restart = Some(self.restart()?);
            }
            "slot" => {
                self.once("slot")?;
                self.spec.slot = Some(self.slot(word)?);
            }
            "burst" | "peakrate" => {
                return Err(SpecError::Conflict(format!(
                    "'{word}' belongs right after a fixed rate, as in tbf: \
                     'rate 20mbit burst 64kb peakrate 100mbit'"
                )))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Parses `word` and its arguments if it is one of the keywords that set up the queue
    /// and the link (`limit`, `queue`, `mtu`, `seed`, `preset`); returns false, having
    /// taken nothing, if it is not.
    fn setup_keyword(&mut self, word: &str) -> Result<bool, SpecError> {
        match word {
            "limit" => self.limit()?,
            "queue" => {
                self.once("queue")?;
                self.queue()?;
            }
            "ring" => {
                self.once("ring")?;
                let ring = self.time(word)?;
                if ring > super::MAX_RING {
                    return Err(SpecError::OutOfRange {
                        what: "ring".into(),
                        range: "0 to 10s",
                        got: ring.to_string(),
                    });
                }
                self.spec.queue.ring = (ring > Duration::ZERO).then_some(ring);
            }
            "mtu" => {
                self.once("mtu")?;
                let (bytes, token) = self.required(word, SIZE, units::size)?;
                self.spec.mtu = Some(
                    u32::try_from(bytes)
                        .ok()
                        .filter(|b| (super::MIN_MTU..=65_535).contains(b))
                        .ok_or_else(|| SpecError::OutOfRange {
                            what: "mtu".into(),
                            range: "68 to 65535 bytes",
                            got: token.to_owned(),
                        })?,
                );
            }
            "seed" => {
                self.once("seed")?;
                self.spec.seed = Some(self.required(word, COUNT, units::integer)?.0);
            }
            "preset" => {
                if self.next != 1 {
                    return Err(SpecError::Conflict(
                        "'preset' must come first: the keywords after it change the preset".into(),
                    ));
                }
                self.once("preset")?;
                let (name, _) =
                    self.required(word, "a preset name like lte", |t| Some(t.to_owned()))?;
                self.spec = preset::expand(&name)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `pps N`: a whole number of packets per second, at least 1, at most one per ns.
    fn packet_rate(&mut self, keyword: &str) -> Result<PacketsPerSec, SpecError> {
        let Some(token) = self.take() else {
            return Err(SpecError::Ended {
                keyword: keyword.to_owned(),
                what: PACKET_RATE,
            });
        };
        let out_of_range = || SpecError::OutOfRange {
            what: format!("'{keyword}'"),
            range: "a whole number of packets per second from 1 to 1000000000",
            got: token.to_owned(),
        };
        let value = match units::packet_rate(token.strip_prefix('-').unwrap_or(token)) {
            Some(_) if token.starts_with('-') => return Err(out_of_range()),
            Some(value) => value,
            None => {
                return Err(SpecError::Expected {
                    what: PACKET_RATE,
                    after: keyword.to_owned(),
                    got: token.to_owned(),
                })
            }
        };
        let max = f64::from(PacketsPerSec::MAX.get());
        if value < 1.0 || value > max || value.fract() != 0.0 {
            return Err(out_of_range());
        }
        // Whole and within 1..=1e9: exact in a u32.
        Ok(PacketsPerSec(value as u32))
    }

    /// `restart FROM RAMP [idle IDLE]`: a share of the rate above 0 and at most 100%, a
    /// ramp and an idle spell each at most [`MAX_RESTART_TIME`], the spell at least 1 ms.
    fn restart(&mut self) -> Result<RestartSpec, SpecError> {
        let (from, token) = self.required("restart", PERCENT, units::percent)?;
        if !(from > 0.0 && from <= 100.0) {
            return Err(SpecError::OutOfRange {
                what: "restart's share of the rate".into(),
                range: "above 0% and at most 100%",
                got: token.to_owned(),
            });
        }
        let ramp = self.time("restart")?;
        let idle = if self.peek() == Some("idle") {
            self.next += 1;
            self.time("idle")?
        } else {
            RestartSpec::DEFAULT_IDLE
        };
        let within = |what: &str, time: Duration, least: Duration| {
            if time < least || time > MAX_RESTART_TIME {
                return Err(SpecError::OutOfRange {
                    what: what.into(),
                    range: if least.is_zero() {
                        "at most 60s"
                    } else {
                        "from 1ms to 60s"
                    },
                    got: time.to_string(),
                });
            }
            Ok(())
        };
        within("restart's ramp", ramp, Duration::ZERO)?;
        within("restart's idle spell", idle, Duration::from_millis(1))?;
        Ok(RestartSpec {
            from: from / 100.0,
            ramp,
            idle,
        })
    }

    /// `burst SIZE [peakrate RATE]` right after a fixed rate, if there.
    fn bucket(&mut self) -> Result<Option<TokenBucket>, SpecError> {
        if self.peek() != Some("burst") {
            if self.peek() == Some("peakrate") {
                return Err(SpecError::Conflict(
                    "'peakrate' needs a bucket: 'rate 20mbit burst 64kb peakrate 100mbit'".into(),
                ));
            }
            return Ok(None);
        }
        self.next += 1;
        let (bytes, token) = self.required("burst", SIZE, units::size)?;
        let burst_bytes = u32::try_from(bytes)
            .ok()
            .filter(|&b| b <= MAX_BURST_BYTES)
            .ok_or_else(|| SpecError::OutOfRange {
                what: "burst".into(),
                range: "at most 1gb",
                got: token.to_owned(),
            })?;
        let peak = if self.peek() == Some("peakrate") {
            self.next += 1;
            Some(self.rate("peakrate")?)
        } else {
            None
        };
        Ok(Some(TokenBucket { burst_bytes, peak }))
    }

    /// The three rate keywords share one slot (a preset's rate is replaced, not a conflict).
    fn rate_once(&mut self) -> Result<(), SpecError> {
        if self.seen.contains(&"rate") {
            return Err(SpecError::Conflict(
                "only one of 'rate', 'schedule' and 'trace' may be given".into(),
            ));
        }
        self.seen.push("rate");
        Ok(())
    }

    fn loss(&mut self, keyword: &str) -> Result<LossSpec, SpecError> {
        match self.peek() {
            Some("random") => {
                self.next += 1;
                Ok(LossSpec::Random(self.chance("loss random")?))
            }
            Some("state") => {
                self.next += 1;
                let p13 = self.percent("loss state", "p13")?;
                let p31 = self.optional_percent("p31")?;
                let p32 = self.optional_percent("p32")?;
                let p23 = self.optional_percent("p23")?;
                let p14 = self.optional_percent("p14")?;
                let complement = Probability::new(1.0 - p13.get()).unwrap_or(Probability::ZERO);
                Ok(LossSpec::State {
                    p13,
                    p31: p31.unwrap_or(complement),
                    p32: p32.unwrap_or(Probability::ZERO),
                    p23: p23.unwrap_or(Probability::ONE),
                    p14: p14.unwrap_or(Probability::ZERO),
                })
            }
            Some("gemodel") => {
                self.next += 1;
                let p = self.percent("loss gemodel", "p")?;
                let r = self.optional_percent("r")?;
                let loss_in_bad = self.optional_percent("1-h")?;
                let loss_in_good = self.optional_percent("1-k")?;
                Ok(LossSpec::GilbertElliott {
                    p,
                    r: r.unwrap_or(Probability::new(1.0 - p.get()).unwrap_or(Probability::ZERO)),
                    loss_in_bad: loss_in_bad.unwrap_or(Probability::ONE),
                    loss_in_good: loss_in_good.unwrap_or(Probability::ZERO),
                })
            }
            _ => Ok(LossSpec::Random(self.chance(keyword)?)),
        }
    }

    fn slot(&mut self, keyword: &str) -> Result<SlotSpec, SpecError> {
        let interval = if self.peek() == Some("distribution") {
            self.next += 1;
            let distribution = self.distribution("slot distribution")?;
            let delay = self.time("slot distribution")?;
            let jitter = self.time("slot distribution")?;
            SlotInterval::Distribution {
                distribution,
                delay,
                jitter,
            }
        } else {
            let min = self.time(keyword)?;
            let max = self.optional(units::time).map_or(min, |(t, _)| t);
            if max < min {
                return Err(SpecError::Conflict(format!(
                    "slot's maximum ({max}) is below its minimum ({min})"
                )));
            }
            SlotInterval::Uniform { min, max }
        };
        let mut spec = SlotSpec {
            interval,
            max_packets: None,
            max_bytes: None,
        };
        while let Some(option) = self.option(&["packets", "bytes"]) {
            if option == "packets" {
                spec.max_packets = Some(self.count("slot packets")?);
            } else {
                spec.max_bytes = Some(self.required("slot bytes", SIZE, units::size)?.0);
            }
        }
        Ok(spec)
    }

    fn finish(mut self) -> Result<LinkSpec, SpecError> {
        if let Some(propagation) = self.distance {
            let delay = self.spec.delay.get_or_insert(DelaySpec {
                delay: Duration::ZERO,
                jitter: Duration::ZERO,
                correlation: Probability::ZERO,
                distribution: Distribution::Uniform,
            });
            delay.delay += propagation;
        }
        if let Some(gap) = self.gap {
            match &mut self.spec.reorder {
                Some(reorder) => reorder.gap = gap,
                None => {
                    return Err(SpecError::Conflict(
                        "'gap' needs 'reorder' (gap N says which packets may be reordered)".into(),
                    ))
                }
            }
        }
        if self.spec.reorder.is_some() && self.spec.delay.is_none_or(|d| d.delay.is_zero()) {
            return Err(SpecError::Conflict(
                "reordering needs a delay: 'reorder' sends some packets ahead of the delayed ones"
                    .into(),
            ));
        }
        if let (Some(bucket), Some(RateSpec::Fixed(fixed))) = (self.spec.bucket, &self.spec.rate) {
            check_bucket(bucket, fixed.rate, self.spec.mtu)?;
        }
        if self.spec.restart.is_some()
            && (self.spec.bucket.is_some() || !matches!(self.spec.rate, Some(RateSpec::Fixed(_))))
        {
            return Err(SpecError::Conflict(
                "'restart' needs a fixed rate without a bucket, as in 'rate 20mbit restart 40% 1500ms'"
                    .into(),
            ));
        }
        if self.spec.ecn && self.spec.loss.is_none() {
            return Err(SpecError::Conflict(
                "'ecn' marks instead of dropping, so it needs a 'loss' model".into(),
            ));
        }
        if self.spec.delay_quantiles.is_some() {
            let delay = self.spec.delay.get_or_insert(DelaySpec {
                delay: Duration::ZERO,
                jitter: Duration::ZERO,
                correlation: Probability::ZERO,
                distribution: Distribution::Uniform,
            });
            if !delay.jitter.is_zero() || delay.distribution != Distribution::Uniform {
                return Err(SpecError::Conflict(
                    "'quantiles' is the delay's whole variation: give it without a jitter or a distribution, as in 'delay 25ms quantiles 0 1ms 3ms'".into(),
                ));
            }
        }
        if let Some(delay) = self.spec.delay {
            if delay.distribution != Distribution::Uniform && delay.jitter.is_zero() {
                return Err(SpecError::Conflict(
                    "'distribution' needs a jitter, as in 'delay 25ms 5ms distribution normal'"
                        .into(),
                ));
            }
        }
        if let Some((mut config, min, max, burst, weight)) = self.red.take() {
            let avpkt = u64::from(config.avpkt_bytes);
            let limit_bytes = self.spec.queue.limit_bytes.unwrap_or(
                u64::from(self.spec.queue.effective_limit_packets()).saturating_mul(avpkt),
            );
            let max = max.unwrap_or(limit_bytes / 4);
            let min = min.unwrap_or(max / 3);
            if min >= max {
                return Err(SpecError::Conflict(format!(
                    "red's min ({min} bytes) must be below its max ({max} bytes)"
                )));
            }
            config.min_bytes = min;
            config.max_bytes = max;
            config.weight = weight.unwrap_or_else(|| {
                let burst = burst
                    .unwrap_or((2 * min + max) as f64 / (3.0 * avpkt as f64))
                    .max(1.0);
                red_weight(burst, min as f64 / avpkt as f64)
            });
            self.spec.queue.discipline = Discipline::Red(config);
        }
        Ok(self.spec)
    }
}

/// A bucket too small for a full frame passes none of them (tbf drops them); a peak at
/// or below the rate is no peak.
fn check_bucket(bucket: TokenBucket, rate: BitsPerSec, mtu: Option<u32>) -> Result<(), SpecError> {
    let mtu = mtu.unwrap_or(1500);
    let frame = u64::from(mtu) + 14;
    if u64::from(bucket.burst_bytes) < frame {
        return Err(SpecError::Conflict(format!(
            "burst {} bytes is smaller than one full frame ({frame} bytes with mtu {mtu}): \
             no full-size packet could ever leave",
            bucket.burst_bytes
        )));
    }
    if let Some(peak) = bucket.peak {
        if peak <= rate {
            return Err(SpecError::Conflict(format!(
                "peakrate {peak} must be above the rate ({rate}): the peak is how fast a \
                 burst leaves"
            )));
        }
    }
    Ok(())
}
