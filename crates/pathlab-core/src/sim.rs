//! Discrete-event simulation of a path under synthetic loads, in virtual time.
//!
//! [`run`] drives a [`Path`] with constant-bit-rate, Poisson and on-off loads, jumping
//! virtual time from one event to the next (a packet emitted, a link's `poll_at`, a
//! sample), and reports what each load experienced. The same seed gives the same report.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::link::{LinkCounters, LinkError, Path};
use crate::packet::{Ecn, Packet};
use crate::rng::Rng;
use crate::spec::LinkSpec;
use crate::time::{Duration, Instant};
use crate::units::BitsPerSec;
use crate::verdict::DropReason;

/// How a load spaces its packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum LoadKind {
    /// Constant bit rate: one packet every `size / rate`, exactly.
    Cbr,
    /// Poisson arrivals: exponential gaps with mean `size / rate`.
    Poisson,
    /// Constant bit rate during `on`, silence during `off`, repeating.
    OnOff {
        /// Length of each burst.
        on: Duration,
        /// Length of each silence.
        off: Duration,
    },
}

/// Which direction of the path a load travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Side A to side B (the spec).
    #[default]
    Forward,
    /// Side B to side A (the reverse spec).
    Reverse,
}

/// A synthetic traffic source; each load is its own flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// Packet spacing.
    #[serde(flatten)]
    pub kind: LoadKind,
    /// Average rate while active (for on-off: during `on`).
    pub rate: BitsPerSec,
    /// Packet length in bytes (as the link accounts it: a full Ethernet frame is 1514).
    pub size_bytes: u32,
    /// When the load starts.
    #[serde(default)]
    pub start: Duration,
    /// When it stops (default: the end of the run).
    #[serde(default)]
    pub stop: Option<Duration>,
    /// Which way it goes.
    #[serde(default)]
    pub direction: Direction,
    /// ECN field of its packets.
    #[serde(default)]
    pub ecn: Ecn,
}

impl Load {
    /// A constant-bit-rate load of `size_bytes` packets at `rate`, forward, for the whole run.
    pub fn cbr(rate: BitsPerSec, size_bytes: u32) -> Load {
        Load {
            kind: LoadKind::Cbr,
            rate,
            size_bytes,
            start: Duration::ZERO,
            stop: None,
            direction: Direction::Forward,
            ecn: Ecn::NotEct,
        }
    }

    /// The mean gap between packets at `rate`, in nanoseconds (exact rational).
    fn gap_nanos(&self) -> f64 {
        f64::from(self.size_bytes) * 8.0 * 1e9 / self.rate.as_f64()
    }
}

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            LoadKind::Cbr => write!(f, "cbr:{}:{}", self.rate, self.size_bytes)?,
            LoadKind::Poisson => write!(f, "poisson:{}:{}", self.rate, self.size_bytes)?,
            LoadKind::OnOff { on, off } => write!(
                f,
                "onoff:{}:{}:on={on}:off={off}",
                self.rate, self.size_bytes
            )?,
        }
        if !self.start.is_zero() {
            write!(f, ":start={}", self.start)?;
        }
        if let Some(stop) = self.stop {
            write!(f, ":stop={stop}")?;
        }
        if self.direction == Direction::Reverse {
            f.write_str(":reverse")?;
        }
        match self.ecn {
            Ecn::NotEct => {}
            Ecn::Ect0 | Ecn::Ce => f.write_str(":ecn")?,
            Ecn::Ect1 => f.write_str(":l4s")?,
        }
        Ok(())
    }
}

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Forward direction.
    pub forward: LinkSpec,
    /// Reverse direction.
    pub reverse: LinkSpec,
    /// Traffic.
    pub loads: Vec<Load>,
    /// Length of the run.
    pub duration: Duration,
    /// Seed of every random choice.
    pub seed: u64,
    /// Period of the time series.
    pub sample_every: Duration,
}

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A link could not be built.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A load has a zero rate or size.
    #[error("load {index} ({load}) needs a positive rate and size")]
    EmptyLoad {
        /// Position of the load (1-based).
        index: usize,
        /// The load as written.
        load: String,
    },
    /// The sample period is zero.
    #[error("the sample period must be positive")]
    ZeroSamplePeriod,
}

/// Order statistics of a set of durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// How many values.
    pub count: u64,
    /// Smallest.
    pub min: Duration,
    /// Mean (rounded to the nanosecond).
    pub mean: Duration,
    /// Median ([nearest rank](crate::quantile)).
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

impl Summary {
    /// Summarizes `values` (nanoseconds); sorts them in place.
    pub fn of(values: &mut [u64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        values.sort_unstable();
        let rank = |q: f64| {
            Duration::from_nanos(crate::quantile::of_sorted(values, q).unwrap_or_default())
        };
        let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
        Summary {
            count: values.len() as u64,
            min: Duration::from_nanos(values[0]),
            mean: Duration::from_nanos((sum / values.len() as u128) as u64),
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: Duration::from_nanos(values[values.len() - 1]),
        }
    }
}

/// What one load experienced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The load.
    pub load: Load,
    /// The load in its command-line form.
    pub description: String,
    /// Packets emitted.
    pub sent_packets: u64,
    /// Bytes emitted.
    pub sent_bytes: u64,
    /// Packets delivered by the end of the run (duplicates included).
    pub delivered_packets: u64,
    /// Bytes delivered by the end of the run.
    pub delivered_bytes: u64,
    /// Packets dropped, by reason (named as [`DropReason::name`]).
    pub dropped: Vec<(DropReason, u64)>,
    /// Packets still inside the path when the run ended.
    pub in_flight_at_end: u64,
    /// Delivered packets that carried CE but were not sent with it.
    pub ce_marked: u64,
    /// Sent bits per second over the load's active time.
    pub offered_bps: f64,
    /// Delivered bits per second over the load's active time.
    pub delivered_bps: f64,
    /// Time spent in the bottleneck queue by delivered packets.
    pub queue_delay: Summary,
    /// One-way delay (arrival in the link to departure) of delivered packets.
    pub owd: Summary,
}

impl LoadReport {
    /// Packets dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().map(|(_, n)| n).sum()
    }

    /// The fraction of the packets sent that were dropped, for any reason (0 when none
    /// was sent).
    pub fn lost_fraction(&self) -> f64 {
        if self.sent_packets == 0 {
            0.0
        } else {
            self.dropped_total() as f64 / self.sent_packets as f64
        }
    }
}

/// One point of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When.
    pub at: Instant,
    /// Forward queue length in packets.
    pub forward_queue_packets: u32,
    /// Forward queue length in bytes.
    pub forward_queue_bytes: u64,
    /// Reverse queue length in packets.
    pub reverse_queue_packets: u32,
    /// Reverse queue length in bytes.
    pub reverse_queue_bytes: u64,
    /// Forward bytes delivered since the previous sample.
    pub forward_delivered_bytes: u64,
    /// Reverse bytes delivered since the previous sample.
    pub reverse_delivered_bytes: u64,
    /// Largest queue delay of a forward packet delivered since the previous sample.
    pub forward_max_queue_delay: Duration,
}

/// Everything a simulation measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// Length of the run.
    pub duration: Duration,
    /// Seed used.
    pub seed: u64,
    /// Canonical forward spec.
    pub forward_spec: String,
    /// Canonical reverse spec.
    pub reverse_spec: String,
    /// Per load, in the order given.
    pub loads: Vec<LoadReport>,
    /// Forward link counters.
    pub forward: LinkCounters,
    /// Reverse link counters.
    pub reverse: LinkCounters,
    /// Time series, one sample per period.
    pub samples: Vec<Sample>,
}

/// Per-load accumulators.
#[derive(Debug, Default)]
struct Tally {
    sent_packets: u64,
    sent_bytes: u64,
    delivered_packets: u64,
    delivered_bytes: u64,
    dropped: [u64; DropReason::ALL.len()],
    ce_marked: u64,
    queue_delays: Vec<u64>,
    owds: Vec<u64>,
}

/// A load's emission schedule.
#[derive(Debug)]
struct Source {
    load: Load,
    stop: Instant,
    /// Packets emitted so far (CBR and on-off place packet k at an exact offset).
    emitted: u64,
    next: Instant,
    rng: Rng,
}

impl Source {
    fn new(load: Load, end: Instant, rng: Rng) -> Source {
        let stop = load.stop.map_or(end, |s| (Instant::ZERO + s).min(end));
        let mut source = Source {
            load,
            stop,
            emitted: 0,
            next: Instant::ZERO + load.start,
            rng,
        };
        if load.kind == LoadKind::Poisson {
            let gap = source.poisson_gap();
            source.next += gap;
        }
        source
    }

    fn poisson_gap(&mut self) -> Duration {
        Duration::from_nanos((self.rng.exponential() * self.load.gap_nanos()).round() as u64)
    }

    /// The next emission instant, if before the stop.
    fn due(&self) -> Option<Instant> {
        (self.next < self.stop).then_some(self.next)
    }

    fn advance(&mut self) {
        self.emitted += 1;
        let start = Instant::ZERO + self.load.start;
        let gap = self.load.gap_nanos();
        self.next = match self.load.kind {
            // Offsets from the start, not accumulated gaps, so rounding never drifts.
            LoadKind::Cbr => {
                start + Duration::from_nanos((self.emitted as f64 * gap).round() as u64)
            }
            LoadKind::Poisson => self.next + self.poisson_gap(),
            LoadKind::OnOff { on, off } => {
                let per_burst = ((on.as_nanos() as f64 / gap).ceil() as u64).max(1);
                let burst = self.emitted / per_burst;
                let within = self.emitted % per_burst;
                let period = (on + off).as_nanos();
                start + Duration::from_nanos(burst * period + (within as f64 * gap).round() as u64)
            }
        };
    }
}

/// Checks that a config can run: a positive sample period, and loads with a positive
/// rate and size.
fn check(config: &SimConfig) -> Result<(), SimError> {
    if config.sample_every.is_zero() {
        return Err(SimError::ZeroSamplePeriod);
    }
    for (index, load) in config.loads.iter().enumerate() {
        if load.rate.bits_per_sec() == 0 || load.size_bytes == 0 {
            return Err(SimError::EmptyLoad {
                index: index + 1,
                load: load.to_string(),
            });
        }
    }
    Ok(())
}

/// Sends every packet the sources have due at `now` into its direction of the path,
/// counting it as sent by its load.
fn emit_due(path: &mut Path, now: Instant, sources: &mut [Source], tallies: &mut [Tally]) {
    for (index, source) in sources.iter_mut().enumerate() {
        while source.due() == Some(now) {
            let load = source.load;
            let mut packet = Packet::synthetic(now, load.size_bytes, index as u64 + 1, load.ecn);
            packet.tag = index as u32;
            let tally = &mut tallies[index];
            tally.sent_packets += 1;
            tally.sent_bytes += u64::from(load.size_bytes);
            match load.direction {
                Direction::Forward => path.forward.enqueue(now, packet),
                Direction::Reverse => path.reverse.enqueue(now, packet),
            }
            source.advance();
        }
    }
}

/// Drains what is still inside the path after `end`, without new traffic, and counts it
/// per load (one count per load, by packet tag).
fn drain_in_flight(path: &mut Path, end: Instant, load_count: usize) -> Vec<u64> {
    let mut in_flight = vec![0u64; load_count];
    let drain_limit = end + Duration::from_secs(3600);
    while let Some(now) = path.poll_at().filter(|t| *t <= drain_limit) {
        for link in [&mut path.forward, &mut path.reverse] {
            while let Some(packet) = link.dequeue(now) {
                if let Some(count) = in_flight.get_mut(packet.tag as usize) {
                    *count += 1;
                }
            }
            for dropped in link.take_dropped() {
                if let Some(count) = in_flight.get_mut(dropped.packet.tag as usize) {
                    *count += 1;
                }
            }
        }
    }
    in_flight
}

/// What one load experienced, from its tally and what it still had in flight at the end
/// of a run of `duration`.
fn load_report(
    load: &Load,
    mut tally: Tally,
    in_flight_at_end: u64,
    duration: Duration,
) -> LoadReport {
    let start = load.start.min(duration);
    let stop = load.stop.unwrap_or(duration).min(duration);
    let active = stop.saturating_sub(start).as_secs_f64();
    let per_second = |bytes: u64| {
        if active > 0.0 {
            bytes as f64 * 8.0 / active
        } else {
            0.0
        }
    };
    LoadReport {
        load: *load,
        description: load.to_string(),
        sent_packets: tally.sent_packets,
        sent_bytes: tally.sent_bytes,
        delivered_packets: tally.delivered_packets,
        delivered_bytes: tally.delivered_bytes,
        dropped: DropReason::ALL
            .iter()
            .map(|r| (*r, tally.dropped[r.index()]))
            .filter(|(_, n)| *n > 0)
            .collect(),
        in_flight_at_end,
        ce_marked: tally.ce_marked,
        offered_bps: per_second(tally.sent_bytes),
        delivered_bps: per_second(tally.delivered_bytes),
        queue_delay: Summary::of(&mut tally.queue_delays),
        owd: Summary::of(&mut tally.owds),
    }
}

/// Runs a simulation.
pub fn run(config: &SimConfig) -> Result<SimReport, SimError> {
    check(config)?;
    let mut rng = Rng::seed_from(config.seed);
    let mut path = Path::new(&config.forward, &config.reverse, rng.next_u64())?;
    path.forward.keep_dropped();
    path.reverse.keep_dropped();
    let end = Instant::ZERO + config.duration;
    let mut sources: Vec<Source> = config
        .loads
        .iter()
        .map(|load| Source::new(*load, end, rng.fork()))
        .collect();
    let mut tallies: Vec<Tally> = config.loads.iter().map(|_| Tally::default()).collect();
    let mut samples = Vec::new();
    let mut next_sample = Instant::ZERO;
    let mut interval = Sample {
        at: Instant::ZERO,
        forward_queue_packets: 0,
        forward_queue_bytes: 0,
        reverse_queue_packets: 0,
        reverse_queue_bytes: 0,
        forward_delivered_bytes: 0,
        reverse_delivered_bytes: 0,
        forward_max_queue_delay: Duration::ZERO,
    };

    loop {
        let next_emission = sources.iter().filter_map(Source::due).min();
        let now = [next_emission, path.poll_at(), Some(next_sample)]
            .into_iter()
            .flatten()
            .min()
            .expect("the next sample is always due");
        if now > end {
            break;
        }
        deliver(&mut path, now, &mut tallies, &mut interval);
        emit_due(&mut path, now, &mut sources, &mut tallies);
        deliver(&mut path, now, &mut tallies, &mut interval);
        if now == next_sample {
            interval.at = now;
            interval.forward_queue_packets = path.forward.queue_len_packets() as u32;
            interval.forward_queue_bytes = path.forward.queue_len_bytes();
            interval.reverse_queue_packets = path.reverse.queue_len_packets() as u32;
            interval.reverse_queue_bytes = path.reverse.queue_len_bytes();
            samples.push(interval);
            interval.forward_delivered_bytes = 0;
            interval.reverse_delivered_bytes = 0;
            interval.forward_max_queue_delay = Duration::ZERO;
            next_sample = now + config.sample_every;
        }
    }

    let forward_counters = path.forward.counters();
    let reverse_counters = path.reverse.counters();
    // What is still inside the path is drained without new traffic and counted per load,
    // so the report accounts for every packet (duplicates included).
    let in_flight = drain_in_flight(&mut path, end, tallies.len());

    let loads = config
        .loads
        .iter()
        .zip(tallies)
        .zip(in_flight)
        .map(|((load, tally), in_flight_at_end)| {
            load_report(load, tally, in_flight_at_end, config.duration)
        })
        .collect();

    Ok(SimReport {
        duration: config.duration,
        seed: config.seed,
        forward_spec: config.forward.to_string(),
        reverse_spec: config.reverse.to_string(),
        loads,
        forward: forward_counters,
        reverse: reverse_counters,
        samples,
    })
}

/// Takes every packet the path delivers or drops by `now` and books it to its load.
fn deliver(path: &mut Path, now: Instant, tallies: &mut [Tally], interval: &mut Sample) {
    for (forward, link) in [(true, &mut path.forward), (false, &mut path.reverse)] {
        while let Some(packet) = link.dequeue(now) {
            let Some(tally) = tallies.get_mut(packet.tag as usize) else {
                continue;
            };
            tally.delivered_packets += 1;
            tally.delivered_bytes += u64::from(packet.len_bytes);
            tally.queue_delays.push(packet.queue_delay.as_nanos());
            tally
                .owds
                .push(now.saturating_since(packet.arrival).as_nanos());
            if packet.ecn == Ecn::Ce {
                tally.ce_marked += 1;
            }
            if forward {
                interval.forward_delivered_bytes += u64::from(packet.len_bytes);
                interval.forward_max_queue_delay =
                    interval.forward_max_queue_delay.max(packet.queue_delay);
            } else {
                interval.reverse_delivered_bytes += u64::from(packet.len_bytes);
            }
        }
        for dropped in link.take_dropped() {
            if let Some(tally) = tallies.get_mut(dropped.packet.tag as usize) {
                tally.dropped[dropped.reason.index()] += 1;
            }
        }
    }
}

/// Why a load description was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The kind is not cbr, poisson or onoff.
    #[error("unknown load kind '{0}': expected cbr, poisson or onoff (as in cbr:15mbit:1500)")]
    UnknownKind(String),
    /// Fewer than three fields.
    #[error("load '{0}' needs KIND:RATE:SIZE, as in cbr:15mbit:1500")]
    Incomplete(String),
    /// The rate field is not a rate.
    #[error("bad rate '{0}' in load: expected a rate like 15mbit")]
    Rate(String),
    /// The size field is not a positive byte count.
    #[error("bad packet size '{0}' in load: expected a number of bytes from 1 to 65535")]
    Size(String),
    /// A time option is not a time.
    #[error("bad time '{0}' in load option: expected a time like 1s")]
    Time(String),
    /// An option pathlab does not know.
    #[error("unknown load option '{0}': expected start=, stop=, on=, off=, reverse, ecn or l4s")]
    Option(String),
    /// on-off without its periods.
    #[error("onoff loads need on=TIME and off=TIME, as in onoff:20mbit:1500:on=1s:off=2s")]
    OnOffPeriods,
}

impl std::str::FromStr for Load {
    type Err = LoadError;

    /// Parses `KIND:RATE:SIZE[:OPTION...]`, e.g. `cbr:15mbit:1500`,
    /// `onoff:20mbit:1500:on=1s:off=2s:start=5s`, `poisson:1mbit:200:reverse`.
    fn from_str(text: &str) -> Result<Load, LoadError> {
        let mut fields = text.split(':');
        let (Some(kind), Some(rate), Some(size)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(LoadError::Incomplete(text.to_owned()));
        };
        let rate = crate::spec::parse_rate(rate).map_err(|_| LoadError::Rate(rate.to_owned()))?;
        let size_bytes = size
            .parse::<u32>()
            .ok()
            .filter(|s| (1..=65_535).contains(s))
            .ok_or_else(|| LoadError::Size(size.to_owned()))?;
        let mut load = Load::cbr(rate, size_bytes);
        let (mut on, mut off) = (None, None);
        let time = |value: &str| {
            crate::spec::parse_time(value).map_err(|_| LoadError::Time(value.to_owned()))
        };
        for option in fields {
            match option.split_once('=') {
                Some(("start", value)) => load.start = time(value)?,
                Some(("stop", value)) => load.stop = Some(time(value)?),
                Some(("on", value)) => on = Some(time(value)?),
                Some(("off", value)) => off = Some(time(value)?),
                None if option == "reverse" => load.direction = Direction::Reverse,
                None if option == "ecn" => load.ecn = Ecn::Ect0,
                None if option == "l4s" => load.ecn = Ecn::Ect1,
                _ => return Err(LoadError::Option(option.to_owned())),
            }
        }
        load.kind = match kind {
            "cbr" => LoadKind::Cbr,
            "poisson" => LoadKind::Poisson,
            "onoff" => match (on, off) {
                (Some(on), Some(off)) if !on.is_zero() => LoadKind::OnOff { on, off },
                _ => return Err(LoadError::OnOffPeriods),
            },
            other => return Err(LoadError::UnknownKind(other.to_owned())),
        };
        Ok(load)
    }
}
