//! `pathlab capacity`'s steps against a server: the path MTU (to size the probes), packet
//! pairs, packet trains, then the search for the available bandwidth with self-loading
//! streams. The estimators are [`pathlab_probe::capacity`]; this module sends and collects.

use std::time::Duration;

use pathlab_core::format::{self, Digits};
use pathlab_core::BitsPerSec;
use pathlab_probe::capacity::{self, AvailableSearch, CapacityProgress, CapacityReport, TrainPlan};
use pathlab_probe::control::Direction;
use pathlab_probe::mtu;
use pathlab_probe::session::SessionError;
use pathlab_probe::shaper;

use crate::{Client, MeasureError, Partial, ProbeArrivals, ServerTarget};

/// How a capacity run goes.
#[derive(Debug, Clone)]
pub struct CapacityOptions {
    /// Which way the probes go.
    pub direction: Direction,
    /// Packet pairs to send.
    pub pairs: u32,
    /// Packet trains to send.
    pub trains: u32,
    /// Whether to search for the available bandwidth after the capacity.
    pub available: bool,
    /// Streams per rate in the search.
    pub streams: u32,
    /// How long each stream lasts.
    pub stream_time: Duration,
    /// The search stops when its bracket is narrower than this fraction of the capacity.
    pub resolution: f64,
    /// At most this many fleets (rates) in the search.
    pub max_fleets: usize,
    /// The byte budget of the constant-rate stream that looks for a token bucket after
    /// the trains ([`pathlab_probe::shaper`]); no stream when `None`.
    pub shaper_budget: Option<u64>,
    /// The highest rate any probe stream is sent at, bits/s (IP layer), below the server's
    /// own bound; the server's bound alone when `None`.
    pub max_rate_bps: Option<f64>,
}

impl CapacityOptions {
    /// The defaults in `direction`: 100 pairs, 30 trains, a shaper stream of up to
    /// [`shaper::DEFAULT_BUDGET_BYTES`], the available bandwidth to 4% of the bottleneck
    /// with fleets of 5 streams of 100 ms.
    pub fn new(direction: Direction) -> CapacityOptions {
        CapacityOptions {
            direction,
            pairs: 100,
            trains: 30,
            available: true,
            streams: 5,
            stream_time: Duration::from_millis(100),
            resolution: 0.04,
            max_fleets: 10,
            shaper_budget: Some(shaper::DEFAULT_BUDGET_BYTES),
            max_rate_bps: None,
        }
    }
}

/// What `pathlab capacity` measures: the server, the directions in turn, and each
/// direction's steps.
#[derive(Debug, Clone)]
pub struct CapacityConfig {
    /// The server to measure against.
    pub target: ServerTarget,
    /// The directions to measure, in this order.
    pub directions: Vec<Direction>,
    /// Packet pairs to send.
    pub pairs: u32,
    /// Packet trains to send.
    pub trains: u32,
    /// Streams per rate in the available-bandwidth search.
    pub streams: u32,
    /// Whether to search for the available bandwidth after the capacity.
    pub available: bool,
    /// The byte budget of the shaper stream after the trains; none when `None`.
    pub shaper_budget: Option<u64>,
    /// The highest rate any probe stream is sent at (the server's own bound applies too).
    pub max_rate: Option<BitsPerSec>,
}

impl CapacityConfig {
    /// The options of `direction`'s run, its probes bounded by `max_rate_bps`.
    fn options(&self, direction: Direction, max_rate_bps: f64) -> CapacityOptions {
        CapacityOptions {
            pairs: self.pairs,
            trains: self.trains,
            streams: self.streams,
            available: self.available,
            shaper_budget: self.shaper_budget,
            max_rate_bps: Some(max_rate_bps),
            ..CapacityOptions::new(direction)
        }
    }
}

/// What a `capacity` run tells its caller as it goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CapacityEvent<'a> {
    /// The server answered: no probe goes faster than `max_rate_bps` (bits/s, the lower
    /// of the configured bound and the server's).
    Probing {
        /// The highest probe rate, bits/s.
        max_rate_bps: f64,
    },
    /// A step of `direction`'s run ended: a line saying what it found.
    Step {
        /// The direction being measured.
        direction: Direction,
        /// What the step found.
        line: &'a str,
    },
}

/// Why a `capacity` run stopped, and what it had measured by then.
#[derive(Debug, thiserror::Error)]
#[error("{}{error}", match direction { Some(d) => format!("{}: {step}: ", d.name()), None => String::new() })]
pub struct CapacityFailure {
    /// The direction that failed; `None` when the first connection, before any probe,
    /// did.
    pub direction: Option<Direction>,
    /// The step that failed ([`CapacityProgress::running_step`]).
    pub step: &'static str,
    /// Why.
    pub error: MeasureError,
    /// The directions that finished.
    pub done: Vec<CapacityReport>,
    /// The failed direction's steps that finished, if any did.
    pub interrupted: Option<Box<CapacityProgress>>,
}

impl CapacityFailure {
    /// Whether the run measured anything before it failed.
    pub fn measured_anything(&self) -> bool {
        !self.done.is_empty() || self.interrupted.is_some()
    }
}

/// Runs `config`: connects once first, so that a wrong host or key fails before anything is
/// sent, then measures each direction in turn with a fresh connection per step;
/// `on_event` hears the highest probe rate and a line per step as it ends.
pub fn run(
    config: &CapacityConfig,
    on_event: &mut dyn FnMut(CapacityEvent<'_>),
) -> Result<Vec<CapacityReport>, Box<CapacityFailure>> {
    let connect = || config.target.connect();
    let limit = connect()
        .map_err(|error| {
            Box::new(CapacityFailure {
                direction: None,
                step: "path MTU",
                error,
                done: Vec::new(),
                interrupted: None,
            })
        })?
        .limits
        .max_rate_bps as f64;
    let max_rate_bps = config
        .max_rate
        .map_or(limit, |rate| (rate.bits_per_sec() as f64).min(limit));
    on_event(CapacityEvent::Probing { max_rate_bps });
    let mut done = Vec::with_capacity(config.directions.len());
    for &direction in &config.directions {
        let options = config.options(direction, max_rate_bps);
        let mut log = |line: &str| on_event(CapacityEvent::Step { direction, line });
        match measure_or_partial(&connect, &options, &mut log) {
            Ok(report) => done.push(report),
            Err(partial) => {
                return Err(Box::new(CapacityFailure {
                    direction: Some(direction),
                    step: partial
                        .measured
                        .as_ref()
                        .map_or("path MTU", |progress| progress.running_step()),
                    error: partial.error,
                    done,
                    interrupted: partial.measured,
                }))
            }
        }
    }
    Ok(done)
}

/// Measures capacity (and available bandwidth) with a fresh connection from `connect` per
/// step; `log` hears a line per step as it ends.
pub fn measure(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &CapacityOptions,
    log: &mut dyn FnMut(&str),
) -> Result<CapacityReport, MeasureError> {
    measure_or_partial(connect, options, log).map_err(|partial| partial.error)
}

/// [`measure`], keeping what a run that fails part way found: the steps that finished
/// (the path MTU, the pairs, the capacity, the search's bracket from the fleets that
/// finished). The step that failed stops the run: each step is bounded by its own time
/// and the grace ([`crate::CONNECT_TIMEOUT`] and the sessions' timeouts), so a
/// server that stops answering costs one grace period, not one per step left.
pub fn measure_or_partial(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &CapacityOptions,
    log: &mut dyn FnMut(&str),
) -> Result<CapacityReport, Partial<CapacityProgress>> {
    let mut progress = CapacityProgress::new(options.direction);
    measure_steps(connect, options, log, &mut progress).map_err(|error| Partial {
        error,
        measured: (!progress.is_empty()).then(|| Box::new(progress)),
    })
}

fn measure_steps(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &CapacityOptions,
    log: &mut dyn FnMut(&str),
    progress: &mut CapacityProgress,
) -> Result<CapacityReport, MeasureError> {
    let direction = options.direction;
    let path = connect()?.path_mtu(direction)?;
    progress.path_mtu_bytes = Some(path.mtu_bytes);
    progress.probes = u64::from(path.probes);
    log(&format!(
        "path MTU {}: {} bytes ({} probes)",
        direction.name(),
        path.mtu_bytes,
        path.probes
    ));
    let payload = path.payload_bytes;
    let packet_bytes = path.mtu_bytes;
    let bits = f64::from(packet_bytes) * 8.0;
    let mut probes = u64::from(path.probes);

    // Pairs, trains and streams: how long, how large and how far apart is
    // pathlab_probe::capacity's plan; this sends and collects.
    let client = connect()?;
    let max_rate =
        (client.limits.max_rate_bps as f64).min(options.max_rate_bps.unwrap_or(f64::MAX));
    // What went through the path before the shaper stream, for what it may have taken
    // from a bucket there: each probe's arrival and IP bytes.
    let overhead = packet_bytes - payload;
    let mut before: Vec<(u64, u32)> = Vec::new();
    let mut record = |arrivals: &ProbeArrivals, plan: &TrainPlan| {
        let bytes = plan.payload_bytes + overhead;
        before.extend(arrivals.arrivals.iter().map(|p| (p.received_ns, bytes)));
    };
    let pairs_plan = capacity::pairs_plan(payload, packet_bytes, max_rate);
    let pairs = send_trains(client, direction, pairs_plan, options.pairs)?;
    record(&pairs, &pairs_plan);
    probes += pairs.sent;
    let pair_estimates = capacity::train_estimates(&pairs.arrivals, 2, bits);
    progress.pair_estimates_bps.clone_from(&pair_estimates);
    progress.probes = probes;
    let rough = pairs_median(&pair_estimates, options.pairs, log)?;

    let plan = capacity::trains_plan(rough, payload, packet_bytes, max_rate);
    let length = plan.length;
    let trains = send_trains(connect()?, direction, plan, options.trains)?;
    record(&trains, &plan);
    probes += trains.sent;
    let train_estimates = capacity::train_estimates(&trains.arrivals, u64::from(length), bits);
    let found = capacity::combine(
        &pair_estimates,
        &train_estimates,
        packet_bytes,
        (
            u64::from(options.pairs),
            u64::from(length),
            u64::from(options.trains),
        ),
    )
    .ok_or_else(|| {
        MeasureError::Session(SessionError::Protocol(
            "no pair or train arrived whole".into(),
        ))
    })?;
    let mut found = found;
    progress.capacity = Some(found.clone());
    progress.probes = probes;
    log(&trains_line(
        length,
        train_estimates.len(),
        options.trains,
        &found,
    ));

    if let Some(budget) = options.shaper_budget {
        let stream = shaper_stream(
            connect,
            direction,
            &found,
            (budget, max_rate, path.payload_bytes),
            &before,
            log,
        )?;
        probes += stream.0;
        found.shaper = stream.1;
        progress.capacity = Some(found.clone());
        progress.probes = probes;
    }
    progress.shaper_done = true;

    let available = if options.available {
        Some(search_available(
            connect,
            options,
            found.bottleneck_bps(),
            &path,
            log,
            progress,
            &mut probes,
        )?)
    } else {
        None
    };
    Ok(CapacityReport {
        direction,
        path_mtu_bytes: path.mtu_bytes,
        capacity: found,
        available,
        probes,
    })
}

/// The median of the packet pairs' estimates, a first rough capacity to plan the trains
/// with, told in `log`; an error when none of the `pairs` sent arrived whole.
fn pairs_median(
    pair_estimates: &[f64],
    pairs: u32,
    log: &mut dyn FnMut(&str),
) -> Result<f64, MeasureError> {
    let rough = capacity::median_ci(pair_estimates)
        .ok_or_else(|| {
            MeasureError::Session(SessionError::Protocol(format!(
                "none of {pairs} packet pairs arrived whole; the path loses too much to measure"
            )))
        })?
        .median_bps;
    log(&format!(
        "packet pairs: {} of {} whole, median {:.2} Mbit/s",
        pair_estimates.len(),
        pairs,
        rough / 1e6
    ));
    Ok(rough)
}

/// Sends `trains` trains of `plan` on `client` in `direction` and collects their arrivals.
fn send_trains(
    client: Client,
    direction: Direction,
    plan: TrainPlan,
    trains: u32,
) -> Result<ProbeArrivals, MeasureError> {
    client.trains(
        direction,
        plan.payload_bytes,
        plan.length,
        trains,
        Duration::from_nanos(plan.spacing_ns),
        Duration::from_nanos(plan.period_ns),
    )
}

/// The log's line about the trains of `length` and the capacity they gave (`whole` of
/// `sent` trains arrived whole).
fn trains_line(length: u32, whole: usize, sent: u32, found: &capacity::Capacity) -> String {
    format!(
        "packet trains of {length}: {} of {} whole; capacity {:.2} Mbit/s (95% CI {:.2} to {:.2}, from the {}){}",
        whole,
        sent,
        found.capacity_bps / 1e6,
        found.low_bps / 1e6,
        found.high_bps / 1e6,
        found.method,
        match found.pair_mode_bps {
            Some(mode) if found.pairs_disagree() => format!(
                "; the pairs' mode is {:.2} Mbit/s: cross traffic before the bottleneck, or bursty timestamps",
                mode / 1e6
            ),
            _ => String::new(),
        }
    )
}

/// The search for the available bandwidth below `bottleneck_bps`: fleets of streams at
/// the rates [`AvailableSearch`] picks, each told in `log`; `probes` counts the streams'
/// packets, and `progress` keeps the bracket of the fleets that finished.
fn search_available(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &CapacityOptions,
    bottleneck_bps: f64,
    path: &mtu::PathMtu,
    log: &mut dyn FnMut(&str),
    progress: &mut CapacityProgress,
    probes: &mut u64,
) -> Result<capacity::Available, MeasureError> {
    let direction = options.direction;
    let mut search = AvailableSearch::new(bottleneck_bps, options.resolution, options.max_fleets);
    while let Some(rate) = search.next_rate() {
        let plan = capacity::stream_plan(
            rate,
            options.stream_time.as_nanos() as u64,
            path.mtu_bytes,
            mtu::overhead(path.ipv6),
        );
        let length = u64::from(plan.length);
        let fleet = send_trains(connect()?, direction, plan, options.streams)?;
        *probes += fleet.sent;
        let streams = capacity::judge_streams(&fleet.arrivals, length, u64::from(options.streams));
        let fleet = search.record(rate, streams);
        progress.probes = *probes;
        log(&format!(
            "streams at {:.2} Mbit/s: {} of {} rising -> {} the available bandwidth",
            rate / 1e6,
            fleet.streams.iter().filter(|s| s.rising()).count(),
            fleet.streams.len(),
            if fleet.above { "above" } else { "below" }
        ));
        progress.available = Some(search.clone().result());
    }
    let result = search.result();
    log(&format!(
        "available bandwidth {:.2} Mbit/s (between {:.2} and {:.2})",
        result.available_bps / 1e6,
        result.low_bps / 1e6,
        result.high_bps / 1e6
    ));
    Ok(result)
}

/// The constant-rate stream after the trains: at the rate of the link beneath any bucket
/// (the larger of the trains' capacity and the pairs' mode, which a bucket's burst passes
/// at), bounded by `max_rate`, for up to `budget` bytes of `payload`-byte probes; the
/// probes it took and what [`shaper::find`] read from it. Where it found a bucket that
/// the probes `before` it (arrival ns, IP bytes) may have drained, it is sent once more
/// after the bucket has had time to fill ([`shaper::refill_ns`]), and that one is read.
fn shaper_stream(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    direction: Direction,
    found: &capacity::Capacity,
    (budget, max_rate, payload): (u64, f64, u32),
    before: &[(u64, u32)],
    log: &mut dyn FnMut(&str),
) -> Result<(u64, Option<shaper::Shaper>), MeasureError> {
    let beneath = found.pair_mode_bps.unwrap_or(0.0).max(found.capacity_bps);
    let rate = beneath.min(max_rate);
    let plan = shaper::stream_plan(rate, budget, payload, found.packet_bytes);
    log(&format!(
        "shaper stream: {} probes of {} B at {} ({}, {}) for a token bucket",
        plan.probes(),
        found.packet_bytes,
        format::rate(rate, Digits::fixed(2)),
        format::bytes_binary(
            plan.probes() * u64::from(found.packet_bytes),
            Digits::up_to(3)
        ),
        format::time(plan.duration_ns() as f64 * 1e-9, Digits::up_to(2)),
    ));
    let send = || -> Result<(ProbeArrivals, Option<shaper::Shaper>), MeasureError> {
        let stream = connect()?.trains(
            direction,
            plan.payload_bytes,
            plan.length,
            plan.trains,
            Duration::from_nanos(plan.spacing_ns),
            Duration::from_nanos(plan.period_ns),
        )?;
        let shaper = shaper::find(&stream.arrivals, stream.sent, found.packet_bytes, budget);
        Ok((stream, shaper))
    };
    let describe = |stream: &ProbeArrivals, shaper: &Option<shaper::Shaper>| match shaper {
        Some(shaper) => shaper.describe(),
        None => format!(
            "shaper stream: {} of {} probes arrived, too few to read",
            stream.arrivals.len(),
            stream.sent
        ),
    };
    let (stream, first) = send()?;
    log(&describe(&stream, &first));
    let mut sent = stream.sent;
    let Some(mut first) = first else {
        return Ok((sent, None));
    };
    let start = stream.arrivals.iter().map(|p| p.received_ns).min();
    first.drained_before_bytes = start.map_or(0.0, |start| {
        shaper::drained_before(before, start, first.sustained_bps)
    });
    let Some(rest) = shaper::refill_ns(&first, first.drained_before_bytes) else {
        return Ok((sent, Some(first)));
    };
    log(&format!(
        "the probes before it may have drained {} of that bucket: the stream again once it \
         has had {} to fill",
        format::bytes_binary(first.drained_before_bytes as u64, Digits::up_to(3)),
        format::time(rest as f64 * 1e-9, Digits::up_to(2))
    ));
    std::thread::sleep(Duration::from_nanos(rest));
    let (again, second) = send()?;
    sent += again.sent;
    let mut second = match second {
        Some(second) if second.shaped() => second,
        other => {
            log(&format!(
                "{}; the first stream's reading stands",
                describe(&again, &other)
            ));
            return Ok((sent, Some(first)));
        }
    };
    second.drained_before_bytes = first.drained_before_bytes;
    second.rested_ns = rest;
    log(&second.describe());
    Ok((sent, Some(second)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(target: ServerTarget) -> CapacityConfig {
        CapacityConfig {
            target,
            directions: vec![Direction::Up, Direction::Down],
            pairs: 10,
            trains: 5,
            streams: 1,
            available: false,
            shaper_budget: None,
            max_rate: Some(BitsPerSec(20_000_000)),
        }
    }

    #[test]
    fn a_direction_runs_with_the_configured_steps_under_the_lower_bound() {
        let options = config(crate::loopback::nobody()).options(Direction::Down, 5e6);
        assert_eq!(options.direction, Direction::Down);
        assert_eq!((options.pairs, options.trains, options.streams), (10, 5, 1));
        assert!(!options.available && options.shaper_budget.is_none());
        assert_eq!(options.max_rate_bps, Some(5e6));
    }

    #[test]
    fn a_server_that_cannot_be_reached_fails_the_run_before_any_direction() {
        let mut events = 0;
        let failure = run(&config(crate::loopback::nobody()), &mut |_| events += 1).unwrap_err();
        assert_eq!(events, 0);
        assert_eq!(failure.direction, None);
        assert!(!failure.measured_anything());
        assert!(matches!(failure.error, MeasureError::Unreachable { .. }));
    }
}
