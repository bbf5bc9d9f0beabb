//! Running the phases of `pathlab bloat`: round-trip probes on one connection to the
//! server while a TCP load runs on another, at the same time.
//!
//! Each phase asks the server for two tests at once, on two control connections: an
//! isochronous round-trip test ([`Client::round_trip`]) and, unless the phase is idle, a
//! bulk TCP test ([`Client::tcp`]) in the phase's direction. The probes run in a thread
//! of their own for the phase plus the drain (so replies held in a deep queue when the
//! load stops still come back); the load runs for the phase. What counts and what it
//! means is decided in `pathlab_probe::bloat`.

use std::thread;
use std::time::Duration;

use pathlab_probe::bloat::{
    self, BloatError, BloatProgress, BloatReport, BloatSettings, Phase, PhaseRecord, PhaseSummary,
};
use pathlab_probe::session::SessionError;

use crate::{Client, MeasureError, Partial, ServerTarget, TcpOptions, TcpTest};
use pathlab_os::unix_now_ns;

/// The load's TCP test for `phase` under `settings` (none when idle).
pub fn load_test(settings: &BloatSettings, phase: Phase) -> Option<TcpTest> {
    Some(TcpTest {
        streams: settings.streams,
        direction: phase.tcp_direction()?,
        duration: Duration::from_nanos(settings.phase_ns),
        interval: Duration::from_nanos(settings.tcp_interval_ns),
        sample_every: Duration::from_nanos(settings.tcp_sample_ns),
        options: TcpOptions {
            window: settings.window_bytes,
            mss: None,
            congestion: settings.congestion.clone(),
        },
    })
}

/// Runs one phase: `probes` carries the round trips, `load` (needed unless `phase` is
/// idle) the TCP test, both connected to the same server.
pub fn run_phase(
    settings: &BloatSettings,
    phase: Phase,
    probes: Client,
    load: Option<Client>,
) -> Result<PhaseRecord, MeasureError> {
    run_phase_or_partial(settings, phase, probes, load).map_err(|partial| partial.error)
}

/// [`run_phase`], keeping what a phase that fails part way measured: the probes' side
/// (every request sent, every reply received) and the load's side of this end, as
/// [`Client::round_trip_or_partial`] and [`Client::tcp_or_partial`] keep them. The probes
/// and the load run at the same time, each bounded by its own time and the grace, so a
/// server that stops answering ends the phase once, one grace period after its end.
pub fn run_phase_or_partial(
    settings: &BloatSettings,
    phase: Phase,
    probes: Client,
    load: Option<Client>,
) -> Result<PhaseRecord, Partial<PhaseRecord>> {
    let test = load_test(settings, phase);
    if test.is_some() && load.is_none() {
        return Err(MeasureError::Session(SessionError::Protocol(format!(
            "the {phase} phase needs a second connection for its load"
        )))
        .into());
    }
    let interval = Duration::from_nanos(settings.probe_interval_ns);
    let count = settings.probe_count(phase);
    let size = settings.probe_size;
    let start_unix_ns = unix_now_ns();
    let (probed, loaded) = thread::scope(|scope| {
        let probing = scope.spawn(move || probes.round_trip_or_partial(interval, size, count));
        let loaded = match (load, &test) {
            (Some(client), Some(test)) => Some(client.tcp_or_partial(test)),
            _ => None,
        };
        let probed = probing.join().expect("the probe thread does not panic");
        (probed, loaded)
    });
    let end_unix_ns = unix_now_ns();
    let record = |probes, load| PhaseRecord {
        phase,
        start_unix_ns,
        end_unix_ns,
        probes,
        load,
    };
    match (probed, loaded.transpose()) {
        (Ok(probes), Ok(load)) => Ok(record(probes, load)),
        // The probes' error says when the server was last heard from (its last reply).
        (Err(probes), load) => Err(Partial {
            error: probes.error,
            measured: probes.measured.map(|probes| {
                Box::new(record(
                    *probes,
                    match load {
                        Ok(load) => load,
                        Err(load) => load.measured.map(|load| *load),
                    },
                ))
            }),
        }),
        (Ok(probes), Err(load)) => Err(Partial {
            error: load.error,
            measured: Some(Box::new(record(probes, load.measured.map(|load| *load)))),
        }),
    }
}

/// What `pathlab bloat` measures: the server and the phases' settings, checked
/// ([`BloatSettings::validate`]).
#[derive(Debug, Clone)]
pub struct BloatConfig {
    /// The server to measure against.
    pub target: ServerTarget,
    /// The phases and their probes and load.
    pub settings: BloatSettings,
}

/// What a `bloat` run tells its caller as it goes.
#[derive(Debug, Clone, Copy)]
pub enum BloatEvent<'a> {
    /// `phase` is connected and begins; its probes last `length`.
    PhaseStarted {
        /// The phase.
        phase: Phase,
        /// How long its probes are sent for, the drain included.
        length: Duration,
    },
    /// A phase finished: what it measured, against the idle baseline once there is one.
    PhaseDone(&'a PhaseSummary),
}

/// Why a `bloat` run failed.
#[derive(Debug, thiserror::Error)]
pub enum BloatRunError {
    /// A phase could not connect or failed part way; `measured` keeps the phases that
    /// finished and what the failed one recorded (none when that is nothing).
    #[error("{} phase: {error}", phase.name())]
    Phase {
        /// The phase that failed.
        phase: Phase,
        /// Why.
        error: MeasureError,
        /// What the run had measured by then.
        measured: Option<Box<BloatProgress>>,
    },
    /// The measurements could not be analysed: no idle round trip came back, say.
    #[error(transparent)]
    Analysis(#[from] BloatError),
}

/// Runs `config`'s phases in turn, each on fresh connections (one for the probes, one for
/// the load), and analyses them; `on_event` hears of each phase as it begins and ends.
pub fn run(
    config: &BloatConfig,
    on_event: &mut dyn FnMut(BloatEvent<'_>),
) -> Result<BloatReport, BloatRunError> {
    let settings = &config.settings;
    let mut records = Vec::with_capacity(settings.phases.len());
    let mut baseline = None;
    for &phase in &settings.phases {
        let failed = |error, records: &mut Vec<PhaseRecord>, interrupted: Option<Box<_>>| {
            let records = std::mem::take(records);
            BloatRunError::Phase {
                phase,
                error,
                measured: (!records.is_empty() || interrupted.is_some()).then(|| {
                    Box::new(BloatProgress {
                        settings: settings.clone(),
                        baseline_rtt_ns: baseline,
                        phases: records
                            .iter()
                            .map(|record| bloat::summarize(settings, baseline, record))
                            .collect(),
                        records,
                        interrupted: interrupted.map(|record| *record),
                    })
                }),
            }
        };
        let (probes, load) = match connect_phase(&config.target, phase) {
            Ok(clients) => clients,
            Err(error) => return Err(failed(error, &mut records, None)),
        };
        on_event(BloatEvent::PhaseStarted {
            phase,
            length: Duration::from_nanos(settings.probe_count(phase) * settings.probe_interval_ns),
        });
        let record = match run_phase_or_partial(settings, phase, probes, load) {
            Ok(record) => record,
            Err(partial) => return Err(failed(partial.error, &mut records, partial.measured)),
        };
        if phase == Phase::Idle {
            baseline = Some(bloat::baseline_rtt_ns(settings, &record).ok_or(
                BloatError::NoBaseline {
                    sent: record.probes.sent,
                },
            )?);
        }
        on_event(BloatEvent::PhaseDone(&bloat::summarize(
            settings, baseline, &record,
        )));
        records.push(record);
    }
    Ok(bloat::analyse(settings.clone(), records)?)
}

/// The connections of `phase`: the probes', and the load's unless it is idle.
fn connect_phase(
    target: &ServerTarget,
    phase: Phase,
) -> Result<(Client, Option<Client>), MeasureError> {
    let probes = target.connect()?;
    let load = if phase == Phase::Idle {
        None
    } else {
        Some(target.connect()?)
    };
    Ok((probes, load))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle phase and a download of 400 ms each, probed every 5 ms: 60 counted probes.
    fn settings() -> BloatSettings {
        let ms = |ms: u64| ms * 1_000_000;
        BloatSettings {
            phases: vec![Phase::Idle, Phase::Download],
            phase_ns: ms(400),
            ramp_up_ns: ms(100),
            drain_ns: ms(100),
            probe_interval_ns: ms(5),
            probe_size: 64,
            streams: 1,
            window_bytes: None,
            congestion: None,
            tcp_interval_ns: ms(100),
            tcp_sample_ns: ms(10),
        }
    }

    #[test]
    fn a_loopback_run_reports_each_phase_as_it_begins_and_ends() {
        let server = crate::loopback::Running::start();
        let config = BloatConfig {
            target: server.target(),
            settings: settings(),
        };
        config.settings.validate().expect("valid settings");
        let mut heard = Vec::new();
        let report = run(&config, &mut |event| {
            heard.push(match event {
                BloatEvent::PhaseStarted { phase, length } => (phase, Some(length)),
                BloatEvent::PhaseDone(summary) => (summary.phase, None),
            });
        })
        .expect("loopback bloat");
        let ms = Duration::from_millis;
        assert_eq!(
            heard,
            [
                (Phase::Idle, Some(ms(400))),
                (Phase::Idle, None),
                (Phase::Download, Some(ms(500))),
                (Phase::Download, None),
            ]
        );
        assert_eq!(report.records.len(), 2);
    }

    #[test]
    fn a_phase_that_cannot_connect_names_itself_and_kept_nothing() {
        let config = BloatConfig {
            target: crate::loopback::nobody(),
            settings: settings(),
        };
        match run(&config, &mut |_| panic!("no phase starts")) {
            Err(BloatRunError::Phase {
                phase: Phase::Idle,
                error: MeasureError::Unreachable { .. },
                measured: None,
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}
