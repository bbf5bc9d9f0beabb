//! `pathlab twin`'s measurement against a server: per direction, the path MTU and a rough
//! capacity from packet trains, then the phases [`pathlab_twin::measure::plan`] lays out
//! (low load; saturation and small packets unless gentle), each a one-way test whose
//! probes come back as samples; then the estimate of both directions, the clocks' offset
//! split between them, assembled into a twin. The plan and the estimators are
//! `pathlab-twin`'s; this module sends and collects.

use std::time::Duration;

use pathlab_core::BitsPerSec;
use pathlab_probe::control::Direction;
use pathlab_probe::control::TcpDirection;
use pathlab_twin::calibrate::{self, TcpRun};
use pathlab_twin::file::TwinFile;
use pathlab_twin::measure::{
    self, estimate, split_offset, DirectionSamples, Estimated, Phase, PlanInput,
};

use crate::capacity::{self, CapacityOptions};
use crate::client::ProbeArrivals;
use crate::{Client, MeasureError, ServerTarget};

/// Bytes a probe's frame counts beyond its IP packet: the Ethernet header (what a rate in
/// tc, netem or pathlab counts).
const ETHERNET_HEADER: u32 = 14;

/// Packet trains for the rough capacity that sizes the saturating phase (then a
/// constant-rate stream of up to [`pathlab_probe::shaper::DEFAULT_BUDGET_BYTES`] finds a
/// token bucket's sustained rate).
const TRAINS: u32 = 10;

/// The timestamps' resolution, ns: the kernel's receive stamps are to the nanosecond,
/// but the sender's reading of its clock and the kernel's transmit stamps are within a
/// microsecond.
const RESOLUTION_NS: f64 = 1_000.0;

/// What `pathlab twin` measures.
#[derive(Debug, Clone)]
pub struct TwinConfig {
    /// The server to measure against.
    pub target: ServerTarget,
    /// The host as the user named it (written in the twin).
    pub host: String,
    /// How long each direction may take.
    pub time_per_direction: Duration,
    /// The highest rate any probe stream is sent at (the server's own bound applies too).
    pub max_rate: Option<BitsPerSec>,
    /// Measure without overfeeding the path (and learn less).
    pub gentle: bool,
    /// Trace files are named `{trace_stem}-up.trace` and `-down.trace`.
    pub trace_stem: String,
}

/// What a `twin` run tells its caller as it goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TwinEvent<'a> {
    /// The server answered: no probe goes faster than `max_rate_bps`.
    Bounds {
        /// The highest probe rate, bits/s of UDP payload.
        max_rate_bps: f64,
    },
    /// `direction`'s rough capacity is being measured: packet trains, then a constant-rate
    /// stream that finds a token bucket.
    Capacity {
        /// Its direction.
        direction: Direction,
    },
    /// A phase of `direction` begins.
    Phase {
        /// Its direction.
        direction: Direction,
        /// Its name.
        name: &'a str,
        /// Its probes.
        phase: Phase,
    },
    /// A bulk TCP flow in `direction` begins ([`pathlab_twin::calibrate`]).
    Tcp {
        /// Its direction.
        direction: Direction,
        /// Whether it waits for an idle spell first ([`pathlab_twin::restart`]).
        after_idle: bool,
    },
    /// Something `direction`'s measurement will not learn, and why.
    Cannot {
        /// Its direction.
        direction: Direction,
        /// What, and why.
        what: &'a str,
    },
}

/// A measured twin: the file, the trace files it names (name, text), and what could not
/// be learned in each direction.
#[derive(Debug, Clone)]
pub struct TwinMeasured {
    /// The twin.
    pub file: TwinFile,
    /// Trace files to write beside it: (file name, mahimahi text).
    pub traces: Vec<(String, String)>,
    /// What each direction could not learn.
    pub cannot: Vec<(Direction, String)>,
}

/// Runs `config`: connects once first (a wrong host or key fails before anything is
/// sent), then measures up and down in turn, a fresh connection per step.
pub fn run(
    config: &TwinConfig,
    on_event: &mut dyn FnMut(TwinEvent<'_>),
) -> Result<TwinMeasured, MeasureError> {
    let connect = || config.target.connect();
    let limit = connect()?.limits.max_rate_bps as f64;
    let max_rate_bps = config
        .max_rate
        .map_or(limit, |rate| (rate.bits_per_sec() as f64).min(limit));
    on_event(TwinEvent::Bounds { max_rate_bps });
    let mut cannot = Vec::new();
    let mut measured = Vec::with_capacity(2);
    for direction in [Direction::Up, Direction::Down] {
        let (samples, said) =
            measure_direction(&connect, config, direction, max_rate_bps, on_event)?;
        cannot.extend(said.into_iter().map(|what| (direction, what)));
        measured.push(samples);
    }
    let [up, down] = [&measured[0], &measured[1]];
    // First without an offset, for the raw bases and the serialization each way.
    let first = |samples: &DirectionSamples, direction: Direction| {
        estimate(samples, 0.0, 0.0).ok_or_else(|| {
            MeasureError::Session(pathlab_probe::session::SessionError::Protocol(format!(
                "{}: no low-load probe arrived: the path lost everything",
                direction.name()
            )))
        })
    };
    let (up0, down0) = (first(up, Direction::Up)?, first(down, Direction::Down)?);
    let (offset, uncertainty) = split_offset(
        up0.base_raw_ns,
        down0.base_raw_ns,
        measure::serialization_ns(&up0.estimates),
        measure::serialization_ns(&down0.estimates),
    );
    let finish = |samples: &DirectionSamples, offset: f64, name: &str| -> Estimated {
        let mut estimated = estimate(samples, offset, uncertainty).expect("it estimated before");
        if estimated.trace.is_some() {
            estimated.estimates.trace_file = Some(format!("{}-{name}.trace", config.trace_stem));
        }
        estimated
    };
    let (up, down) = (finish(up, offset, "up"), finish(down, -offset, "down"));
    for (direction, estimated) in [(Direction::Up, &up), (Direction::Down, &down)] {
        cannot.extend(
            estimated
                .cannot
                .iter()
                .map(|what| (direction, what.clone())),
        );
    }
    let traces = [&up, &down]
        .into_iter()
        .filter_map(|e| Some((e.estimates.trace_file.clone()?, e.trace.clone()?)))
        .collect();
    Ok(TwinMeasured {
        file: TwinFile {
            host: Some(config.host.clone()),
            up: pathlab_twin::assemble::direction(&up.estimates),
            down: pathlab_twin::assemble::direction(&down.estimates),
        },
        traces,
        cannot,
    })
}

/// What a twin says when the sparse flow beside a saturating phase could not run.
const SPARSE_FAILED: &str =
    "whether the queue keeps flows apart: the sparse flow's session beside the saturating one \
     failed";

/// A phase run: its name (for the progress), the phase, what arrived.
type Run<'a> = dyn FnMut(&str, Phase) -> Result<Vec<pathlab_twin::Sample>, MeasureError> + 'a;

/// One direction's phases: its samples, and what its plan said it will not learn.
fn measure_direction(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    config: &TwinConfig,
    direction: Direction,
    max_rate_bps: f64,
    on_event: &mut dyn FnMut(TwinEvent<'_>),
) -> Result<(DirectionSamples, Vec<String>), MeasureError> {
    let path = connect()?.path_mtu(direction)?;
    let overhead = path.mtu_bytes - path.payload_bytes + ETHERNET_HEADER;
    let input = PlanInput {
        seconds: config.time_per_direction.as_secs_f64(),
        max_rate_bps,
        full_payload: path.payload_bytes,
        small_payload: crate::owd::OwdConfig::MIN_PROBE_BYTES,
        overhead_bytes: overhead,
    };
    let capacity = if config.gentle {
        None
    } else {
        on_event(TwinEvent::Capacity { direction });
        Some(rough_capacity(connect, direction, max_rate_bps)?)
    };
    let plan = measure::plan(&input, capacity, config.gentle);
    for what in &plan.cannot {
        on_event(TwinEvent::Cannot { direction, what });
    }
    let start = |phase: Phase| {
        connect()?.start_one_way(
            direction,
            phase.rate_bps.round() as u64,
            phase.payload_bytes,
            phase.count,
            100,
        )
    };
    let samples_of = |arrivals: ProbeArrivals, phase: Phase| {
        let records: Vec<(u64, u64, u64)> = arrivals
            .arrivals
            .iter()
            .map(|p| (p.seq, p.sent_ns, p.received_ns))
            .collect();
        measure::samples_of(&records, arrivals.sent, phase.payload_bytes + overhead)
    };
    let mut run = |name: &str, phase: Phase| -> Result<Vec<pathlab_twin::Sample>, MeasureError> {
        on_event(TwinEvent::Phase {
            direction,
            name,
            phase,
        });
        Ok(samples_of(start(phase)?.run_raw()?, phase))
    };
    // A saturating phase with a sparse flow beside it, in a session of its own (whether
    // the queue keeps flows apart): the sparse flow's failure loses only that figure.
    let saturate = |run: &mut Run<'_>, name: &str, phase: Phase| {
        let sparse_phase = measure::sparse_beside(&phase);
        let sparse = start(sparse_phase).ok();
        std::thread::scope(|scope| {
            let sparse = sparse.map(|test| scope.spawn(move || test.run_raw()));
            let saturated = run(name, phase)?;
            let sparse = sparse
                .and_then(|thread| thread.join().ok()?.ok())
                .map(|arrivals| samples_of(arrivals, sparse_phase));
            Ok::<_, MeasureError>((saturated, sparse))
        })
    };
    let low_load = run("low load", plan.low_load)?;
    let Saturated {
        saturation,
        sparse,
        longer,
        small_plan,
    } = saturating(&input, &plan, &low_load, &mut run, &saturate)?;
    let mut cannot = plan.cannot;
    cannot.extend((saturation.is_some() && sparse.is_none()).then(|| SPARSE_FAILED.to_owned()));
    let small = small_plan.map(|p| run("small packets", p)).transpose()?;
    let found = saturation
        .as_deref()
        .and_then(|saturated| measure::queue_built(&low_load, saturated, RESOLUTION_NS));
    let [tcp, tcp_after_idle] = tcp_after(
        config,
        direction,
        found,
        path.mtu_bytes,
        on_event,
        &mut cannot,
    );
    let samples = DirectionSamples {
        low_load,
        saturation,
        longer,
        small,
        sparse,
        tcp,
        tcp_after_idle,
        resolution_ns: RESOLUTION_NS,
    };
    Ok((samples, cannot))
}

/// A saturating phase's samples and its sparse flow's (if that session ran).
type Saturation = (Vec<pathlab_twin::Sample>, Option<Vec<pathlab_twin::Sample>>);

/// A saturating phase run with its sparse flow beside it: the phase's name, the phase.
type Saturate<'a> = dyn Fn(&mut Run<'_>, &str, Phase) -> Result<Saturation, MeasureError> + 'a;

/// What a direction's saturating phases brought back, and the small-packet phase sized
/// from the last.
struct Saturated {
    saturation: Option<Vec<pathlab_twin::Sample>>,
    sparse: Option<Vec<pathlab_twin::Sample>>,
    longer: Option<Vec<pathlab_twin::Sample>>,
    small_plan: Option<Phase>,
}

/// `plan`'s saturating phase, sent again faster while it builds no queue
/// ([`measure::escalate`]), then a longer one where its rate may move
/// ([`measure::longer_phase`]).
fn saturating(
    input: &PlanInput,
    plan: &measure::Plan,
    low_load: &[pathlab_twin::Sample],
    run: &mut Run<'_>,
    saturate: &Saturate<'_>,
) -> Result<Saturated, MeasureError> {
    let Some(mut phase) = plan.saturation else {
        return Ok(Saturated {
            saturation: None,
            sparse: None,
            longer: None,
            small_plan: plan.small,
        });
    };
    let mut small_plan = plan.small;
    let (mut saturated, mut sparse) = saturate(run, "saturation", phase)?;
    for _ in 0..measure::MAX_ESCALATIONS {
        let Some(faster) = measure::escalate(input, &phase, low_load, &saturated, RESOLUTION_NS)
        else {
            break;
        };
        phase = faster;
        let again = "saturation again, faster (no queue built)";
        (saturated, sparse) = saturate(run, again, phase)?;
        small_plan = measure::small_after(input, &phase);
    }
    let longer = measure::longer_phase(input, &phase, low_load, &saturated)
        .map(|longer| run("saturation, longer (the rate may move)", longer))
        .transpose()?;
    Ok(Saturated {
        saturation: Some(saturated),
        sparse,
        longer,
        small_plan,
    })
}

/// `direction`'s rough capacity, bits/s of frames: packet trains, then a constant-rate
/// stream that finds a token bucket's sustained rate (once its burst is spent: trains pass
/// a bucket at the rate of the link beneath it).
fn rough_capacity(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    direction: Direction,
    max_rate_bps: f64,
) -> Result<f64, MeasureError> {
    let options = CapacityOptions {
        pairs: 10,
        trains: TRAINS,
        available: false,
        max_rate_bps: Some(max_rate_bps),
        ..CapacityOptions::new(direction)
    };
    let c = capacity::measure(connect, &options, &mut |_| {})?.capacity;
    Ok(c.bottleneck_bps() * c.frame_capacity_bps / c.capacity_bps.max(1.0))
}

/// The bulk TCP flows after `direction`'s saturating phases ([`calibrating_flow`]): one at
/// once (the rate TCP meets), one after an idle spell (how the path restarts); only where
/// the phases `found` a bottleneck below the rate they were sent at (within the rate
/// allowed): TCP itself is bounded by nothing else. What a flow that could not run leaves
/// unlearned goes to `cannot`.
fn tcp_after(
    config: &TwinConfig,
    direction: Direction,
    found: Option<bool>,
    mtu_bytes: u32,
    on_event: &mut dyn FnMut(TwinEvent<'_>),
    cannot: &mut Vec<String>,
) -> [Option<TcpRun>; 2] {
    match found {
        Some(true) => {}
        Some(false) => {
            cannot.push(TCP_UNBOUNDED.to_owned());
            return [None, None];
        }
        None => return [None, None],
    }
    let frame_bytes = mtu_bytes + ETHERNET_HEADER;
    let mut flow = |after_idle: bool, what: &str| {
        on_event(TwinEvent::Tcp {
            direction,
            after_idle,
        });
        if after_idle {
            pings_alone(config, pathlab_twin::restart::IDLE_BEFORE_S)
                .map_err(|e| cannot.push(format!("{what}: the pings before it failed: {e}")))
                .ok()?;
        }
        calibrating_flow(config, direction, frame_bytes)
            .map_err(|e| cannot.push(format!("{what}: its TCP flow failed: {e}")))
            .ok()
    };
    let warm = flow(false, "how fast bulk TCP goes");
    let cold = warm
        .is_some()
        .then(|| flow(true, "how the path restarts after an idle spell"))
        .flatten();
    [warm, cold]
}

/// What a twin says when the saturating phases found no bottleneck below the rate allowed.
const TCP_UNBOUNDED: &str =
    "how fast bulk TCP goes (for the rate it meets): the probes found no bottleneck below the \
     rate allowed, and a TCP flow is bounded by nothing but the path";

/// `twin check`'s round trips for `seconds`, alone on the path
/// ([`pathlab_twin::restart::IDLE_BEFORE_S`]).
fn pings_alone(config: &TwinConfig, seconds: u64) -> Result<(), MeasureError> {
    let rtt = rtt_config(&config.target, seconds);
    crate::rtt::run(&rtt, &mut |_| {}).map_err(|p| p.error)?;
    Ok(())
}

/// A round-trip test of `twin check`'s probes for `seconds`.
fn rtt_config(target: &ServerTarget, seconds: u64) -> crate::rtt::RttConfig {
    use pathlab_twin::check::{RTT_BYTES, RTT_INTERVAL_MS};
    let interval = Duration::from_millis(RTT_INTERVAL_MS);
    crate::rtt::RttConfig {
        target: target.clone(),
        interval,
        probe_bytes: RTT_BYTES,
        count: crate::rtt::RttConfig::count_for(Duration::from_secs(seconds), interval),
    }
}

/// A bulk TCP flow in `direction` for [`calibrate::TCP_SECONDS`], counted every
/// [`calibrate::INTERVAL_MS`]: what [`pathlab_twin::calibrate`] weighs the rate against.
fn calibrating_flow(
    config: &TwinConfig,
    direction: Direction,
    frame_bytes: u32,
) -> Result<TcpRun, MeasureError> {
    let tcp = crate::tcp::TcpConfig {
        target: config.target.clone(),
        test: crate::TcpTest {
            streams: 1,
            direction: match direction {
                Direction::Up => TcpDirection::Up,
                Direction::Down => TcpDirection::Down,
            },
            duration: Duration::from_secs(calibrate::TCP_SECONDS),
            interval: Duration::from_millis(calibrate::INTERVAL_MS),
            // Several round-trip samples an interval: which intervals had a queue
            // (`pathlab_twin::restart`).
            sample_every: Duration::from_millis(calibrate::INTERVAL_MS / 5),
            // The check's: a loss-based sender fills the bottleneck (the host's default,
            // often BBR, paces at what it estimates; through the bond 33 Mbit/s where
            // cubic met 37).
            options: crate::TcpOptions {
                congestion: Some(pathlab_twin::check::CONGESTION.to_owned()),
                ..crate::TcpOptions::default()
            },
        },
    };
    let report = crate::tcp::run(&tcp, &mut |_| {}).map_err(|p| p.error)?;
    let streams = match direction {
        Direction::Up => &report.up,
        Direction::Down => &report.down,
    };
    let stream = streams.first().ok_or_else(|| {
        MeasureError::Session(pathlab_probe::session::SessionError::Protocol(
            "the server reported no TCP stream".into(),
        ))
    })?;
    // The sender's segment size where it reported one; else a full frame less IPv4's and
    // TCP's headers with timestamps (20 + 32 bytes).
    let mss = stream
        .samples
        .iter()
        .map(|s| s.mss)
        .max()
        .filter(|&mss| mss > 0)
        .unwrap_or(frame_bytes.saturating_sub(ETHERNET_HEADER + 52));
    let rtt_samples = stream
        .samples
        .iter()
        .map(|s| pathlab_twin::calibrate::RttSample {
            at_ns: s.at_ns,
            srtt_us: s.srtt_us,
            retransmitted: s.retrans_segments,
        })
        .collect();
    Ok(TcpRun {
        interval_ns: report.interval_ns,
        interval_bytes: stream.interval_bytes.clone(),
        mss,
        frame_bytes,
        rtt_samples,
    })
}

/// `pathlab twin check`'s real side: the check's workloads against the server, in turn
/// ([`pathlab_twin::check`]'s plan): an idle round-trip test, bulk TCP up with round trips
/// beside it, the same down, paced probes both ways at once.
pub fn check_real(
    target: &ServerTarget,
    plan: &pathlab_twin::check::Plan,
    on_step: &mut dyn FnMut(&str),
) -> Result<pathlab_twin::check::PathRuns, MeasureError> {
    use pathlab_twin::check::{DirectionRuns, PathRuns, PROBE_BYTES, PROBE_RATE_BPS};
    let rtt_run =
        |seconds| crate::rtt::run(&rtt_config(target, seconds), &mut |_| {}).map_err(|p| p.error);
    on_step("idle round trips");
    let idle = rtt_run(plan.idle_s)?;
    let bulk = |direction: TcpDirection| {
        let config = crate::tcp::TcpConfig {
            target: target.clone(),
            test: crate::TcpTest {
                streams: 1,
                direction,
                duration: Duration::from_secs(plan.bulk_s),
                interval: Duration::from_secs(1),
                sample_every: Duration::from_millis(100),
                options: crate::TcpOptions {
                    congestion: Some(plan.congestion.clone()),
                    ..crate::TcpOptions::default()
                },
            },
        };
        std::thread::scope(|scope| {
            let beside = scope.spawn(|| rtt_run(plan.bulk_s));
            let tcp = crate::tcp::run(&config, &mut |_| {}).map_err(|p| p.error);
            (tcp, beside.join().expect("the round trips do not panic"))
        })
    };
    on_step(&format!(
        "bulk TCP up ({}), round trips beside it",
        plan.congestion
    ));
    let (tcp_up, rtt_up) = bulk(TcpDirection::Up);
    let (tcp_up, rtt_up) = (tcp_up?, rtt_up?);
    on_step(&format!(
        "bulk TCP down ({}), round trips beside it",
        plan.congestion
    ));
    let (tcp_down, rtt_down) = bulk(TcpDirection::Down);
    let (tcp_down, rtt_down) = (tcp_down?, rtt_down?);
    on_step("paced probes both ways at once");
    // Each way's probes cross a direction of their own: both at once, a session each.
    let probes = |direction: Direction| {
        let config = crate::owd::OwdConfig {
            target: target.clone(),
            rate: pathlab_core::BitsPerSec(PROBE_RATE_BPS),
            probe_bytes: PROBE_BYTES,
            count: crate::owd::OwdConfig::count_for(
                Duration::from_secs(plan.probes_s),
                pathlab_core::BitsPerSec(PROBE_RATE_BPS),
                PROBE_BYTES,
            ),
            directions: vec![direction],
            window: 100,
        };
        let result = crate::owd::run(&config, &mut |_| {}).map_err(|p| p.error)?;
        result.into_iter().next().ok_or_else(|| {
            MeasureError::Session(pathlab_probe::session::SessionError::Protocol(format!(
                "the server returned no {} probes",
                direction.name()
            )))
        })
    };
    let (owd_up, owd_down) = std::thread::scope(|scope| {
        let down = scope.spawn(|| probes(Direction::Down));
        let up = probes(Direction::Up);
        (up, down.join().expect("the probes do not panic"))
    });
    let (owd_up, owd_down) = (owd_up?, owd_down?);
    Ok(PathRuns {
        idle,
        up: DirectionRuns {
            tcp: tcp_up,
            up: true,
            rtt: rtt_up,
            owd: owd_up,
        },
        down: DirectionRuns {
            tcp: tcp_down,
            up: false,
            rtt: rtt_down,
            owd: owd_down,
        },
    })
}
