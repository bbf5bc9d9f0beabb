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

use pathlab_probe::bloat::{BloatSettings, Phase, PhaseRecord};
use pathlab_probe::session::SessionError;

use crate::{Client, MeasureError, Partial, TcpOptions, TcpTest};
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
