//! The RFC 6349 TCP throughput test against a pathlab server, step by step: path MTU both
//! ways, baseline RTT, the bottleneck rate (given, or measured with packet trains), the plan (BDP, windows, connections), TCP with
//! one connection and with the plan's connections. Every formula and decision is in
//! [`pathlab_probe::rfc6349`]; this module runs the measurements, reads the host's TCP
//! settings from `/proc/sys`, and tells the caller about each step as it ends.

use std::path::Path;
use std::time::{Duration, Instant};

use pathlab_probe::capacity::CapacityReport;
use pathlab_probe::control::{Direction, TcpDirection};
use pathlab_probe::mtu::PathMtu;
use pathlab_probe::rfc6349::{
    analyse_phase, link_rate_bps, AnalysisError, Baseline, KernelSettings, Phase, PhaseResult,
    Plan, PlanError, PlanInputs, RateSource, Rfc6349Progress, Rfc6349Report, StepTime,
};
use pathlab_probe::session::SessionError;
use pathlab_probe::tcp::TcpTestReport;

use crate::capacity::{self, CapacityOptions};
use crate::{Client, MeasureError, Partial, ServerTarget, TcpOptions, TcpTest};

/// The most parallel streams a pathlab server accepts in one TCP test.
pub use crate::MAX_STREAMS as MAX_CONNECTIONS;

/// The largest MSS Linux takes in TCP_MAXSEG (MAX_TCP_WINDOW).
const MAX_TCP_MAXSEG: u32 = 32_767;

/// How the test is run.
#[derive(Debug, Clone)]
pub struct Rfc6349Options {
    /// Which way the data goes: `Up` (client to server) or `Down` (`-R`).
    pub direction: TcpDirection,
    /// The bottleneck rate, bits/s, counting what `framing` counts; measured (packet
    /// trains and a shaper stream, [`crate::capacity`]) when `None`.
    pub rate_bps: Option<f64>,
    /// Which link bytes the rate counts.
    pub framing: pathlab_probe::rfc6349::Framing,
    /// Whether the bottleneck's frames carry a VLAN tag.
    pub vlan: bool,
    /// Each TCP run's length.
    pub duration: Duration,
    /// The idle period over which the baseline RTT is the smallest round trip.
    pub idle: Duration,
    /// Time between round-trip probes.
    pub probe_interval: Duration,
    /// UDP payload of each round-trip probe, bytes.
    pub probe_bytes: u32,
    /// `-w`: every connection's window (socket buffers at both ends), bytes.
    pub window: Option<u32>,
    /// `--mss`, bytes.
    pub mss: Option<u32>,
    /// Congestion control of the senders; the host's default when `None`.
    pub congestion: Option<String>,
    /// How often the senders sample `TCP_INFO`.
    pub sample_every: Duration,
    /// How long each of the receivers' byte counts lasts.
    pub count_interval: Duration,
}

impl Rfc6349Options {
    /// The defaults for `direction` and `rate_bps`: ethernet framing, 10 s runs, a 2 s idle
    /// period probed every 10 ms with 64-byte probes, TCP_INFO every 10 ms, bytes counted
    /// per 100 ms.
    pub fn new(direction: TcpDirection, rate_bps: Option<f64>) -> Rfc6349Options {
        Rfc6349Options {
            direction,
            rate_bps,
            framing: pathlab_probe::rfc6349::Framing::Ethernet,
            vlan: false,
            duration: Duration::from_secs(10),
            idle: Duration::from_secs(2),
            probe_interval: Duration::from_millis(10),
            probe_bytes: 64,
            window: None,
            mss: None,
            congestion: None,
            sample_every: Duration::from_millis(10),
            count_interval: Duration::from_millis(100),
        }
    }
}

/// What the test tells its caller as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A step begins.
    Step(&'static str),
    /// Step 1 found one direction's path MTU.
    Mtu(&'a PathMtu),
    /// Step 2 ended.
    Baseline(&'a Baseline),
    /// A line of the capacity measurement's progress (step 3 without a rate).
    Note(&'a str),
    /// Step 3 measured the bottleneck.
    Capacity(&'a CapacityReport),
    /// Step 4: the plan, with the host's settings and the congestion control in use.
    Plan {
        /// The plan.
        plan: &'a Plan,
        /// The host's settings.
        kernel: &'a KernelSettings,
        /// The senders' congestion control.
        congestion: &'a str,
    },
    /// A TCP run ended.
    Phase(&'a PhaseResult),
}

/// Why the test failed.
#[derive(Debug, thiserror::Error)]
pub enum Rfc6349Error {
    /// A measurement failed.
    #[error("{step}: {source}")]
    Measure {
        /// The step.
        step: &'static str,
        /// Why.
        #[source]
        source: MeasureError,
    },
    /// The inputs make no plan.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A TCP run could not be analysed.
    #[error("{step}: {source}")]
    Analysis {
        /// The step.
        step: &'static str,
        /// Why.
        #[source]
        source: AnalysisError,
    },
    /// The host's TCP settings cannot be read.
    #[error("cannot read {path}: {source}")]
    Settings {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Times the steps.
struct Steps(Vec<StepTime>, Option<Instant>);

impl Steps {
    fn start(&mut self, step: &'static str, on_event: &mut dyn FnMut(Event<'_>)) {
        self.end();
        on_event(Event::Step(step));
        self.0.push(StepTime {
            step: step.to_owned(),
            started_unix_ns: pathlab_os::unix_now_ns(),
            took_ns: 0,
        });
        self.1 = Some(Instant::now());
    }

    fn end(&mut self) {
        if let (Some(last), Some(started)) = (self.0.last_mut(), self.1.take()) {
            last.took_ns = started.elapsed().as_nanos() as u64;
        }
    }
}

/// Step names, as the report's `steps` list them.
pub mod step {
    /// Step 1, up.
    pub const MTU_UP: &str = "path MTU up";
    /// Step 1, down.
    pub const MTU_DOWN: &str = "path MTU down";
    /// Step 2.
    pub const BASELINE: &str = "baseline RTT";
    /// Step 3.
    pub const BOTTLENECK: &str = "bottleneck";
    /// Step 4.
    pub const PLAN: &str = "BDP, windows, connections";
    /// Step 5 with one connection.
    pub const SINGLE: &str = "TCP, one connection";
    /// Step 5 with the plan's connections.
    pub const MULTIPLE: &str = "TCP, the plan's connections";
}

/// What `pathlab tcp --rfc6349` measures: the server and how the test is run.
#[derive(Debug, Clone)]
pub struct Rfc6349Config {
    /// The server to measure against.
    pub target: ServerTarget,
    /// How the test is run.
    pub options: Rfc6349Options,
}

/// Runs `config`'s test with this host's TCP settings (read from `/proc/sys`), a fresh
/// connection to its server per measurement; `on_event` hears of each step.
pub fn run_config(
    config: &Rfc6349Config,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Rfc6349Report, Partial<Rfc6349Progress, Rfc6349Error>> {
    let kernel = read_kernel_settings(Path::new("/proc/sys")).map_err(Partial::nothing)?;
    run_or_partial(
        &|| config.target.connect(),
        &config.options,
        kernel,
        on_event,
    )
}

/// Runs the test; `connect` opens a fresh control connection to the server (each
/// measurement takes one), `settings` is the host's TCP settings, `on_event` hears of each
/// step.
pub fn run(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &Rfc6349Options,
    kernel: KernelSettings,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Rfc6349Report, Rfc6349Error> {
    run_or_partial(connect, options, kernel, on_event).map_err(|partial| partial.error)
}

/// [`run`], keeping what a test that fails part way found: the steps that finished, the
/// capacity run's finished steps when step 3 failed, and this end's side of a TCP run that
/// failed. The step that fails ends the test: each is bounded by its own time and the
/// grace, so a server that stops answering costs one grace period, not one per step left.
pub fn run_or_partial(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &Rfc6349Options,
    kernel: KernelSettings,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Rfc6349Report, Partial<Rfc6349Progress, Rfc6349Error>> {
    let mut progress = Rfc6349Progress {
        steps: Vec::new(),
        failed_step: String::new(),
        mtu_up: None,
        mtu_down: None,
        baseline: None,
        capacity: None,
        capacity_progress: None,
        kernel: kernel.clone(),
        plan: None,
        congestion_control: options
            .congestion
            .clone()
            .unwrap_or_else(|| kernel.congestion_control.clone()),
        duration_ns: options.duration.as_nanos() as u64,
        single: None,
        multiple: None,
        interrupted_run: None,
    };
    let mut steps = Steps(Vec::new(), None);
    match run_steps(
        connect,
        options,
        kernel,
        on_event,
        &mut steps,
        &mut progress,
    ) {
        Ok(report) => Ok(report),
        Err(error) => {
            steps.end();
            progress.failed_step = steps.0.last().map(|s| s.step.clone()).unwrap_or_default();
            progress.steps = steps.0;
            let measured = progress.mtu_up.is_some();
            Err(Partial {
                error,
                measured: measured.then(|| Box::new(progress)),
            })
        }
    }
}

/// What a failed measurement of step `step` is as the test's error.
fn measure(step: &'static str) -> impl Fn(MeasureError) -> Rfc6349Error {
    move |source| Rfc6349Error::Measure { step, source }
}

fn run_steps(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &Rfc6349Options,
    kernel: KernelSettings,
    on_event: &mut dyn FnMut(Event<'_>),
    steps: &mut Steps,
    progress: &mut Rfc6349Progress,
) -> Result<Rfc6349Report, Rfc6349Error> {
    let mut path_mtu = |step, direction| {
        steps.start(step, on_event);
        let mtu = connect()
            .and_then(|c| c.path_mtu(direction))
            .map_err(measure(step))?;
        on_event(Event::Mtu(&mtu));
        Ok::<_, Rfc6349Error>(mtu)
    };
    let mtu_up = path_mtu(step::MTU_UP, Direction::Up)?;
    progress.mtu_up = Some(mtu_up.clone());
    let mtu_down = path_mtu(step::MTU_DOWN, Direction::Down)?;
    progress.mtu_down = Some(mtu_down.clone());

    steps.start(step::BASELINE, on_event);
    let baseline = measure_baseline(connect, options)?;
    progress.baseline = Some(baseline.clone());
    on_event(Event::Baseline(&baseline));

    steps.start(step::BOTTLENECK, on_event);
    let (rate_bps, rate_source, capacity) = bottleneck(connect, options, on_event, progress)?;

    steps.start(step::PLAN, on_event);
    let plan = Plan::new(&PlanInputs {
        direction: options.direction,
        mtu_up_bytes: mtu_up.mtu_bytes,
        mtu_down_bytes: mtu_down.mtu_bytes,
        ipv6: mtu_up.ipv6,
        baseline_rtt_ns: baseline.rtt_ns,
        bottleneck_bps: rate_bps,
        rate_source,
        framing: options.framing,
        vlan: options.vlan,
        window_bytes: options.window.map(u64::from),
        mss_bytes: options.mss,
        max_connections: MAX_CONNECTIONS,
        kernel: kernel.clone(),
    })?;
    let congestion = options
        .congestion
        .clone()
        .unwrap_or_else(|| kernel.congestion_control.clone());
    progress.plan = Some(plan.clone());
    on_event(Event::Plan {
        plan: &plan,
        kernel: &kernel,
        congestion: &congestion,
    });

    let duration_ns = options.duration.as_nanos() as u64;
    let phase = |step: &'static str,
                 steps: &mut Steps,
                 progress: &mut Rfc6349Progress,
                 on_event: &mut dyn FnMut(Event<'_>),
                 connections: u32,
                 window: u64|
     -> Result<Phase, Rfc6349Error> {
        steps.start(step, on_event);
        let run = tcp_run(connect, options, &plan, connections, window).map_err(|partial| {
            progress.interrupted_run = partial.measured.map(|measured| *measured);
            measure(step)(partial.error)
        })?;
        let result = analyse_phase(&plan, &run, connections, window, duration_ns)
            .map_err(|source| Rfc6349Error::Analysis { step, source })?;
        on_event(Event::Phase(&result));
        Ok(Phase { result, run })
    };
    // One connection with the window one connection may have: the plan's when one is
    // enough, else the largest.
    let single_window = if plan.connections == 1 {
        plan.window_per_connection_bytes
    } else {
        plan.largest_window_bytes
    };
    let single = phase(step::SINGLE, steps, progress, on_event, 1, single_window)?;
    progress.single = Some(single.clone());
    let multiple = if plan.connections > 1 {
        Some(phase(
            step::MULTIPLE,
            steps,
            progress,
            on_event,
            plan.connections,
            plan.window_per_connection_bytes,
        )?)
    } else {
        None
    };
    steps.end();
    Ok(Rfc6349Report {
        steps: std::mem::take(&mut steps.0),
        mtu_up,
        mtu_down,
        baseline,
        capacity,
        kernel,
        plan,
        congestion_control: congestion,
        duration_ns,
        single,
        multiple,
    })
}

/// The baseline step: round trips over the idle period, the smallest the baseline RTT;
/// an error when none is answered.
fn measure_baseline(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &Rfc6349Options,
) -> Result<Baseline, Rfc6349Error> {
    let count = (options.idle.as_nanos() / options.probe_interval.as_nanos().max(1)).max(1) as u64;
    let report = connect()
        .and_then(|c| c.round_trip(options.probe_interval, options.probe_bytes, count))
        .map_err(measure(step::BASELINE))?;
    let baseline = Baseline {
        idle_ns: options.idle.as_nanos() as u64,
        interval_ns: options.probe_interval.as_nanos() as u64,
        probe_bytes: options.probe_bytes,
        rtt_ns: report.rtt.min_ns,
        report,
    };
    if baseline.report.replies == 0 {
        return Err(Rfc6349Error::Measure {
            step: step::BASELINE,
            source: MeasureError::Session(SessionError::Timeout(
                "any reply to the round-trip probes",
            )),
        });
    }
    Ok(baseline)
}

/// The bottleneck step: the rate given, or one measured with packet trains (told as it
/// ends, and kept in `progress`, as is what a failed measurement had found); gives the
/// rate, where it came from, and the measurement.
fn bottleneck(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &Rfc6349Options,
    on_event: &mut dyn FnMut(Event<'_>),
    progress: &mut Rfc6349Progress,
) -> Result<(f64, RateSource, Option<CapacityReport>), Rfc6349Error> {
    Ok(match options.rate_bps {
        Some(rate) => (rate, RateSource::Given, None),
        None => {
            let direction = match options.direction {
                TcpDirection::Down => Direction::Down,
                _ => Direction::Up,
            };
            let found = capacity::measure_or_partial(
                connect,
                &CapacityOptions {
                    available: false,
                    ..CapacityOptions::new(direction)
                },
                &mut |line| on_event(Event::Note(line)),
            )
            .map_err(|partial| {
                progress.capacity_progress = partial.measured.map(|measured| *measured);
                measure(step::BOTTLENECK)(partial.error)
            })?;
            progress.capacity = Some(found.clone());
            on_event(Event::Capacity(&found));
            // A token bucket's sustained rate when the shaper stream found one: the trains
            // measure the link beneath it.
            let rate = link_rate_bps(
                found.capacity.bottleneck_bps(),
                found.capacity.packet_bytes,
                options.framing,
                options.vlan,
            );
            (rate, RateSource::Measured, Some(found))
        }
    })
}

/// One TCP run of `streams` connections, each with `window` and the plan's MSS.
fn tcp_run(
    connect: &dyn Fn() -> Result<Client, MeasureError>,
    options: &Rfc6349Options,
    plan: &Plan,
    streams: u32,
    window: u64,
) -> Result<TcpTestReport, Partial<TcpTestReport>> {
    connect()?.tcp_or_partial(&TcpTest {
        streams,
        direction: options.direction,
        duration: options.duration,
        interval: options.count_interval,
        sample_every: options.sample_every,
        options: TcpOptions {
            window: Some(u32::try_from(window).unwrap_or(u32::MAX)),
            // The plan's MSS fits the path MTU found, which may be below the route's
            // (a path that drops large packets silently). TCP_MAXSEG refuses more than
            // 32767: a larger plan (loopback's 65495) is what the route gives anyway.
            mss: (plan.mss_bytes <= MAX_TCP_MAXSEG).then_some(plan.mss_bytes),
            congestion: options.congestion.clone(),
        },
    })
}

/// Reads the host's TCP settings under `root` (`/proc/sys` for the running host).
pub fn read_kernel_settings(root: &Path) -> Result<KernelSettings, Rfc6349Error> {
    let read = |name: &str| -> Result<String, Rfc6349Error> {
        let path = root.join(name);
        std::fs::read_to_string(&path)
            .map(|text| text.trim().to_owned())
            .map_err(|source| Rfc6349Error::Settings {
                path: path.display().to_string(),
                source,
            })
    };
    let bad = |name: &str, text: &str| Rfc6349Error::Settings {
        path: root.join(name).display().to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected contents '{text}'"),
        ),
    };
    let number = |name: &str| -> Result<u64, Rfc6349Error> {
        let text = read(name)?;
        text.parse().map_err(|_| bad(name, &text))
    };
    let triple = |name: &str| -> Result<[u64; 3], Rfc6349Error> {
        let text = read(name)?;
        let values: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| bad(name, &text))?;
        values.try_into().map_err(|_| bad(name, &text))
    };
    Ok(KernelSettings {
        tcp_rmem: triple("net/ipv4/tcp_rmem")?,
        tcp_wmem: triple("net/ipv4/tcp_wmem")?,
        rmem_max: number("net/core/rmem_max")?,
        wmem_max: number("net/core/wmem_max")?,
        window_scaling: number("net/ipv4/tcp_window_scaling")? != 0,
        timestamps: number("net/ipv4/tcp_timestamps")? != 0,
        sack: number("net/ipv4/tcp_sack")? != 0,
        congestion_control: read("net/ipv4/tcp_congestion_control")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_settings_are_read_from_a_sysctl_tree() {
        let root =
            std::env::temp_dir().join(format!("pathlab-rfc6349-sysctl-{}", std::process::id()));
        let files = [
            ("net/ipv4/tcp_rmem", "4096\t131072\t6291456\n"),
            ("net/ipv4/tcp_wmem", "4096\t16384\t4194304\n"),
            ("net/core/rmem_max", "212992\n"),
            ("net/core/wmem_max", "212992\n"),
            ("net/ipv4/tcp_window_scaling", "1\n"),
            ("net/ipv4/tcp_timestamps", "1\n"),
            ("net/ipv4/tcp_sack", "0\n"),
            ("net/ipv4/tcp_congestion_control", "cubic\n"),
        ];
        for (name, text) in files {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let settings = read_kernel_settings(&root).unwrap();
        assert_eq!(settings.tcp_rmem, [4096, 131_072, 6_291_456]);
        assert_eq!(settings.tcp_wmem[2], 4_194_304);
        assert_eq!((settings.rmem_max, settings.wmem_max), (212_992, 212_992));
        assert!(settings.window_scaling && settings.timestamps && !settings.sack);
        assert_eq!(settings.congestion_control, "cubic");
        assert_eq!(settings.largest_window_bytes(), 212_992);
        std::fs::write(root.join("net/ipv4/tcp_wmem"), "4096 16384\n").unwrap();
        let error = read_kernel_settings(&root).unwrap_err().to_string();
        assert!(
            error.contains("tcp_wmem") && error.contains("4096 16384"),
            "{error}"
        );
        std::fs::remove_dir_all(&root).unwrap();
        assert!(read_kernel_settings(&root)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }

    #[test]
    fn the_host_settings_read() {
        // Whatever this host has, it reads (every Linux has these files).
        let settings = read_kernel_settings(Path::new("/proc/sys")).unwrap();
        assert!(settings.tcp_rmem[2] >= settings.tcp_rmem[0]);
        assert!(!settings.congestion_control.is_empty());
    }
}
