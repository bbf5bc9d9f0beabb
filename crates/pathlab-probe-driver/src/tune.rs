//! `pathlab tune`'s measurements and reads: the path's rate and round trip measured against
//! a server where they were not given, and this host's (or a copy's) TCP settings read
//! from `/proc/sys` and `/sys/class/net`. The checklist itself is
//! [`pathlab_diagnose::tune`], sans-IO; this module hands it what it looks at.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pathlab_core::BitsPerSec;
use pathlab_diagnose::tune::{
    self, HostSettings, RttMeasurement, TuneInputError, TunePath, TuneReport,
};
use pathlab_probe::capacity::Capacity;
use pathlab_probe::control::Direction;

use crate::capacity::{self, CapacityOptions};
use crate::{MeasureError, ServerTarget};

/// Round trips sent to measure the RTT to the server.
const PROBES: u64 = 20;
/// Time between them: 1 s in all, and far apart enough that no probe queues behind the last.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// UDP payload of each probe.
const PROBE_BYTES: u32 = 64;

/// What `pathlab tune` looks at: the path (its rate and round trip, each given or measured
/// against a server) and where the host's settings are read from.
#[derive(Debug, Clone)]
pub struct TuneConfig {
    /// The server to measure what was not given against; none when both were given.
    pub server: Option<ServerTarget>,
    /// The path's bottleneck rate; measured from the server when `None`.
    pub rate: Option<BitsPerSec>,
    /// The path's round-trip time; measured to the server when `None`.
    pub rtt: Option<Duration>,
    /// Where the settings are read from: `/` for this host, or a copy of another's.
    pub root: PathBuf,
}

/// Why a [`TuneConfig`] cannot be made: what is missing to know the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TuneConfigError {
    /// Neither the rate nor a server to measure it against.
    #[error("the path's bottleneck rate is needed: give it, or a server to measure it against")]
    MissingRate,
    /// Neither the round trip nor a server to measure it to.
    #[error("the path's round-trip time is needed: give it, or a server to measure it to")]
    MissingRtt,
    /// Neither the rate, nor the round trip, nor a server.
    #[error("the path's bottleneck rate and round-trip time are needed: give both, or a server")]
    MissingBoth,
}

impl TuneConfig {
    /// A configuration that knows its path: what was not given, a server measures.
    pub fn new(
        server: Option<ServerTarget>,
        rate: Option<BitsPerSec>,
        rtt: Option<Duration>,
        root: PathBuf,
    ) -> Result<TuneConfig, TuneConfigError> {
        match (&server, rate, rtt) {
            (None, None, Some(_)) => Err(TuneConfigError::MissingRate),
            (None, Some(_), None) => Err(TuneConfigError::MissingRtt),
            (None, None, None) => Err(TuneConfigError::MissingBoth),
            _ => Ok(TuneConfig {
                server,
                rate,
                rtt,
                root,
            }),
        }
    }
}

/// Why `tune` could not advise.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Measuring the rate or the round trip failed.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// The server answered none of the round-trip probes.
    #[error("{host} answered none of {probes} round-trip probes: no RTT to tune for")]
    NoReplies {
        /// The server.
        host: String,
        /// Probes sent.
        probes: u64,
    },
    /// The path's rate or round trip, given or measured, makes no path to tune for.
    #[error(transparent)]
    Path(#[from] TuneInputError),
}

/// Measures what `config` did not give (the rate first, then the round trip), reads the
/// host's settings and advises.
pub fn run(config: &TuneConfig) -> Result<TuneReport, TuneError> {
    let server = || {
        config
            .server
            .as_ref()
            .expect("TuneConfig::new: a server measures what was not given")
    };
    let (rate, rate_measurement) = match config.rate {
        Some(rate) => (rate, None),
        None => {
            let capacity = measure_rate(server())?;
            (
                BitsPerSec(capacity.bottleneck_bps().round() as u64),
                Some(capacity),
            )
        }
    };
    let (rtt_ns, rtt_measurement) = match config.rtt {
        Some(rtt) => (rtt.as_nanos() as u64, None),
        None => {
            let measurement = measure_rtt(server())?;
            (measurement.min_ns, Some(measurement))
        }
    };
    let path = TunePath::new(
        rate.bits_per_sec(),
        rtt_ns,
        pathlab_core::units::MSS_BYTES as u64,
    )?;
    let mut report = tune::advise(&path, &read_host_settings(&config.root));
    report.rtt_measurement = rtt_measurement;
    report.rate_measurement = rate_measurement;
    Ok(report)
}

/// The bottleneck from `server` to this host (what a download's window must fill), by
/// `pathlab capacity`'s packet trains and shaper stream, without the available-bandwidth
/// search.
fn measure_rate(server: &ServerTarget) -> Result<Capacity, MeasureError> {
    let connect = || server.connect();
    drop(connect()?);
    let options = CapacityOptions {
        available: false,
        ..CapacityOptions::new(Direction::Down)
    };
    Ok(capacity::measure(&connect, &options, &mut |_| {})?.capacity)
}

/// The RTT to `server`: the minimum of [`PROBES`] round trips, since the window must fill
/// the path without queueing (queueing adds delay, not pipe); the median is kept to show.
fn measure_rtt(server: &ServerTarget) -> Result<RttMeasurement, TuneError> {
    let report = server
        .connect()?
        .round_trip(PROBE_INTERVAL, PROBE_BYTES, PROBES)?;
    if report.replies == 0 {
        return Err(TuneError::NoReplies {
            host: server.host.clone(),
            probes: PROBES,
        });
    }
    Ok(RttMeasurement {
        host: server.host.clone(),
        probes: report.sent,
        replies: report.replies,
        interval_ns: PROBE_INTERVAL.as_nanos() as u64,
        min_ns: report.rtt.min_ns,
        median_ns: report.rtt.p50_ns,
    })
}

/// Reads every setting [`tune::advise`] looks at from under `root` (`/` for this host):
/// `proc/sys/...`, `sys/class/net/IF/tx_queue_len` and `proc/self/auxv` (the page size).
/// What cannot be read is left out, and reported as unknown.
pub fn read_host_settings(root: &Path) -> HostSettings {
    let read = |path: PathBuf| {
        std::fs::read(path)
            .ok()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    };
    let proc_sys = root.join("proc/sys");
    let sysctl = tune::SYSCTLS
        .iter()
        .filter_map(|name| {
            read(proc_sys.join(name.replace('.', "/"))).map(|value| ((*name).to_owned(), value))
        })
        .collect();
    let class_net = root.join("sys/class/net");
    let interfaces = std::fs::read_dir(&class_net).ok().map(|entries| {
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name != "lo")
            .map(|name| {
                let length = read(class_net.join(&name).join("tx_queue_len"));
                (name, length)
            })
            .collect::<BTreeMap<_, _>>()
    });
    let page_size_bytes = std::fs::read(root.join("proc/self/auxv"))
        .ok()
        .and_then(|auxv| tune::page_size_from_auxv(&auxv));
    HostSettings {
        sysctl,
        interfaces,
        page_size_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_needs_its_rate_and_rtt_given_or_a_server_to_measure_them() {
        let rate = Some(BitsPerSec(1_000_000_000));
        let rtt = Some(Duration::from_millis(170));
        let root = PathBuf::from("/");
        let new = |server: Option<ServerTarget>, rate, rtt| {
            TuneConfig::new(server, rate, rtt, root.clone()).map(|_| ())
        };
        assert_eq!(new(None, rate, rtt), Ok(()));
        assert_eq!(new(None, None, rtt), Err(TuneConfigError::MissingRate));
        assert_eq!(new(None, rate, None), Err(TuneConfigError::MissingRtt));
        assert_eq!(new(None, None, None), Err(TuneConfigError::MissingBoth));
        let server = || Some(ServerTarget::new("192.0.2.1", None));
        assert_eq!(new(server(), None, None), Ok(()));
        assert_eq!(new(server(), rate, None), Ok(()));
    }

    #[test]
    fn given_a_path_it_reads_a_copy_of_the_settings_and_advises() {
        let root = std::env::temp_dir().join(format!("pathlab-tune-{}", std::process::id()));
        let ipv4 = root.join("proc/sys/net/ipv4");
        std::fs::create_dir_all(&ipv4).unwrap();
        std::fs::write(ipv4.join("tcp_congestion_control"), "bbr\n").unwrap();
        std::fs::create_dir_all(root.join("sys/class/net/eth0")).unwrap();
        std::fs::write(root.join("sys/class/net/eth0/tx_queue_len"), "1000\n").unwrap();
        let settings = read_host_settings(&root);
        assert_eq!(
            settings
                .sysctl
                .get("net.ipv4.tcp_congestion_control")
                .map(String::as_str),
            Some("bbr\n")
        );
        assert_eq!(
            settings
                .interfaces
                .as_ref()
                .and_then(|i| i.get("eth0").cloned()),
            Some(Some("1000\n".to_owned()))
        );
        let config = TuneConfig::new(
            None,
            Some(BitsPerSec(1_000_000_000)),
            Some(Duration::from_millis(100)),
            root.clone(),
        )
        .unwrap();
        let report = run(&config).expect("a path given needs no server");
        assert!(report.rtt_measurement.is_none() && report.rate_measurement.is_none());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
