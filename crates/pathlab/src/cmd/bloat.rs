//! `pathlab bloat`: latency under load, graded as a bufferbloat test does.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use pathlab_core::format::{self, Digits};
use pathlab_probe::bloat::{BloatReport, BloatSettings, Phase, PhaseSummary};
use pathlab_probe_driver::bloat::{BloatConfig, BloatEvent, BloatRunError};

use crate::cmd::client::{measure_error, Progress};
use crate::usage;

/// Which loaded phase to run after the idle one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DirectionArg {
    /// The server sends (download).
    Down,
    /// The client sends (upload).
    Up,
    /// Both at once.
    Both,
}

/// Not counted at the start of each loaded phase: TCP's slow start, while the queue fills.
const RAMP_UP: Duration = Duration::from_secs(1);
/// Probes go on this long after a loaded phase's load, uncounted, so that replies held in
/// a deep queue come back instead of counting as lost.
const DRAIN: Duration = Duration::from_secs(1);
/// UDP payload of a probe.
const PROBE_SIZE: u32 = 64;
/// The load's receivers count bytes per this interval (the counted window is cut on it).
const TCP_INTERVAL: Duration = Duration::from_millis(100);
/// The load's senders sample TCP_INFO (the smoothed RTT the RPM's loaded half uses) this often.
const TCP_SAMPLE: Duration = Duration::from_millis(10);

/// Arguments of `pathlab bloat`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Phases: idle (probes only), then probes while TCP saturates the path: download, \
upload, and both at once (or only the one --direction names). Each phase lasts -t; the first \
second of a loaded phase (TCP's ramp-up) is not counted, and probes go on for a second after \
the load stops to collect late replies (not counted either). The grade is DSLReports' (A+ under \
5 ms of added median latency, A 30, B 60, C 200, D 400, F beyond); RPM as \
draft-ietf-ippm-responsiveness computes it. See docs/bloat.md."
)]
pub struct Args {
    #[command(flatten)]
    pub server: crate::cmd::args::ServerAddress,
    /// Run the idle phase and only this loaded phase (default: down, up and both in turn).
    #[arg(long, value_enum, value_name = "DIRECTION")]
    pub direction: Option<DirectionArg>,
    /// Length of each phase, the idle one included (the first 1 s of a loaded phase is not counted).
    #[arg(short = 't', long, value_name = "TIME", default_value = "10s", value_parser = crate::cmd::parse_time)]
    pub time: pathlab_core::Duration,
    /// Parallel TCP streams per loaded direction.
    #[arg(short = 'P', long, value_name = "N", default_value_t = 4)]
    pub parallel: u32,
    /// Congestion control of the load's senders (reno, cubic, bbr, ...).
    #[arg(short = 'C', long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Socket buffer size (SO_SNDBUF/SO_RCVBUF) of the load at both ends, e.g. 4M.
    #[arg(short = 'w', long, value_name = "SIZE")]
    pub window: Option<String>,
    /// Interval between round-trip probes (64-byte UDP payloads).
    #[arg(short = 'i', long, value_name = "TIME", default_value = "20ms", value_parser = crate::cmd::parse_time)]
    pub interval: pathlab_core::Duration,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

impl Args {
    /// The run's settings, checked.
    fn settings(&self) -> anyhow::Result<BloatSettings> {
        let window_bytes = self
            .window
            .as_deref()
            .map(|w| {
                let bytes = pathlab_core::spec::parse_size(w)?;
                u32::try_from(bytes)
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| anyhow::anyhow!("window '{w}': give 1 byte to 4 GB"))
            })
            .transpose()
            .map_err(usage)?;
        if self.parallel == 0 {
            return Err(usage(anyhow::anyhow!(
                "-P 0: at least one stream is needed to load the path"
            )));
        }
        let loaded: &[Phase] = match self.direction {
            None => &[Phase::Download, Phase::Upload, Phase::Both],
            Some(DirectionArg::Down) => &[Phase::Download],
            Some(DirectionArg::Up) => &[Phase::Upload],
            Some(DirectionArg::Both) => &[Phase::Both],
        };
        let settings = BloatSettings {
            phases: std::iter::once(Phase::Idle)
                .chain(loaded.iter().copied())
                .collect(),
            phase_ns: self.time.as_nanos(),
            ramp_up_ns: RAMP_UP.as_nanos() as u64,
            drain_ns: DRAIN.as_nanos() as u64,
            probe_interval_ns: self.interval.as_nanos(),
            probe_size: PROBE_SIZE,
            streams: self.parallel,
            window_bytes,
            congestion: self.congestion.clone(),
            tcp_interval_ns: TCP_INTERVAL.as_nanos() as u64,
            tcp_sample_ns: TCP_SAMPLE.as_nanos() as u64,
        };
        settings.validate().map_err(|e| {
            usage(anyhow::anyhow!(
                "-t {} -i {}: {e}",
                self.time,
                self.interval
            ))
        })?;
        Ok(settings)
    }
}

/// What a saved `bloat` run that failed part way holds.
const PARTIAL: &str = "the phases that finished, analysed (phases, records), and the raw \
record of the phase that failed as this end saw it (interrupted: every probe sent and reply \
received, the load's client side), not analysed";

/// Runs `pathlab bloat`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let settings = args.settings()?;
    let human = !args.client.output.json;
    let mut out = std::io::stdout();
    if human {
        print_plan(&mut out, &args.server.host, &settings)?;
    }
    // The plan is said first, even when the key file then turns out unusable.
    let config = BloatConfig {
        settings,
        target: args.client.target(&args.server.host)?,
    };
    let mut progress = None;
    let mut printed = Ok(());
    let outcome = pathlab_probe_driver::bloat::run(&config, &mut |event| match event {
        BloatEvent::PhaseStarted { phase, length } => {
            progress = Progress::start(phase.name(), length);
        }
        BloatEvent::PhaseDone(summary) => {
            progress = None;
            if human && printed.is_ok() {
                printed = print_phase(&mut out, summary).and_then(|()| out.flush());
            }
        }
    });
    drop(progress);
    let report = outcome.map_err(|error| match error {
        BloatRunError::Phase {
            phase,
            error,
            measured,
        } => {
            let error = measure_error(error).context(format!("{} phase", phase.name()));
            match measured {
                Some(progress) => args.client.save_partial(
                    error,
                    PARTIAL,
                    pathlab_results::RunResult::BloatPartial(progress),
                ),
                None => error,
            }
        }
        analysis @ BloatRunError::Analysis(_) => anyhow::Error::new(analysis),
    })?;
    printed?;
    args.client
        .save(|| pathlab_results::RunResult::Bloat(Box::new(report.clone())))?;
    if human {
        let mut clocks = pathlab_probe::rtt::RoundTripClocks::default();
        for record in &report.records {
            clocks += record.probes.timed_by;
        }
        writeln!(out, "probe round trips {}", clocks.describe())?;
        writeln!(out, "overall grade {}: {}", report.grade, report.verdict)?;
    } else {
        let printed = BloatReport {
            records: Vec::new(),
            ..report
        };
        println!("{}", serde_json::to_string_pretty(&printed)?);
    }
    Ok(())
}

fn print_plan(
    out: &mut impl std::io::Write,
    host: &str,
    settings: &BloatSettings,
) -> std::io::Result<()> {
    let phases: Vec<&str> = settings.phases.iter().map(|p| p.name()).collect();
    let mut load = format!(
        "{} TCP stream{} per direction",
        settings.streams,
        if settings.streams == 1 { "" } else { "s" }
    );
    if let Some(cc) = &settings.congestion {
        let _ = write!(load, ", {cc}");
    }
    if let Some(window) = settings.window_bytes {
        let _ = write!(load, ", window {window} B");
    }
    writeln!(
        out,
        "bloat against {host}: {} phases ({}) of {:.1} s, a {}-byte probe every {} ms, {load}; \
         loaded phases count from {:.1} s",
        phases.len(),
        phases.join(", "),
        settings.phase_ns as f64 * 1e-9,
        settings.probe_size,
        format::in_millis(settings.probe_interval_ns as f64 * 1e-9, Digits::fixed(2)),
        settings.ramp_up_ns as f64 * 1e-9,
    )
}

fn print_phase(out: &mut impl std::io::Write, phase: &PhaseSummary) -> std::io::Result<()> {
    let rpm = phase
        .responsiveness
        .map_or_else(|| "-".to_owned(), |r| format!("{:.0}", r.rpm));
    writeln!(
        out,
        "{:<9} rtt p50 {:>8} p90 {:>8} p99 {:>8} ms  lost {}/{} ({})  {rpm} RPM{}",
        phase.phase.name(),
        format::in_millis(phase.rtt.p50_ns as f64 * 1e-9, Digits::fixed(2)),
        format::in_millis(phase.rtt.p90_ns as f64 * 1e-9, Digits::fixed(2)),
        format::in_millis(phase.rtt.p99_ns as f64 * 1e-9, Digits::fixed(2)),
        phase.probes_sent - phase.probes_answered.min(phase.probes_sent),
        phase.probes_sent,
        format::fraction_as_percent(phase.probe_loss, Digits::fixed(2)),
        phase
            .grade
            .map_or_else(String::new, |g| format!("  grade {g}")),
    )?;
    if let Some(added) = phase.added {
        writeln!(
            out,
            "{:<9} added p50 {:>8} p90 {:>8} p99 {:>8} ms  load up {}, down {}, {} segments retransmitted",
            "",
            format::in_millis(added.p50_ns as f64 * 1e-9, Digits::fixed(2).signed()),
            format::in_millis(added.p90_ns as f64 * 1e-9, Digits::fixed(2).signed()),
            format::in_millis(added.p99_ns as f64 * 1e-9, Digits::fixed(2).signed()),
            format::rate(phase.load_up_bps, Digits::fixed(2)),
            format::rate(phase.load_down_bps, Digits::fixed(2)),
            phase.retransmitted_segments,
        )?;
    }
    writeln!(out, "{:<9} {}", "", phase.verdict)
}
