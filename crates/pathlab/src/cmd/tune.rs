//! `pathlab tune`: the window a path needs, what this host's TCP settings allow, and what
//! to change (the CESNET checklist of seed 001). Read-only: it prints commands, it runs
//! none of them.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use pathlab_core::BitsPerSec;
use pathlab_diagnose::tune::{self, HostSettings, RttMeasurement, TunePath};
use pathlab_probe_driver::Client;

use crate::cmd::args::{ClientKey, JsonOutput};
use crate::cmd::client::measure_error;
use crate::usage;

/// Round trips sent to measure the RTT to HOST.
const PROBES: u64 = 20;
/// Time between them: 1 s in all, and far apart enough that no probe queues behind the last.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// UDP payload of each probe.
const PROBE_BYTES: u32 = 64;

/// Arguments of `pathlab tune`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A pathlab server to measure the RTT to (NAME or ADDRESS, optionally :PORT); not
    /// needed when both --rate and --rtt are given.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// The path's bottleneck rate (`1gbit`, `100mbit`, `10M`).
    #[arg(long, value_name = "RATE", value_parser = crate::cmd::parse_rate)]
    pub rate: Option<BitsPerSec>,
    /// The path's round-trip time (`170ms`; a bare number is seconds); measured from HOST
    /// when not given.
    #[arg(long, value_name = "TIME", value_parser = crate::cmd::parse_time)]
    pub rtt: Option<pathlab_core::Duration>,
    /// Read the settings under DIR instead of this host's: DIR/proc/sys/...,
    /// DIR/sys/class/net/IF/tx_queue_len and DIR/proc/self/auxv (the page size), to check
    /// another machine's settings from a copy.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    #[command(flatten)]
    pub key: ClientKey,
    #[command(flatten)]
    pub output: JsonOutput,
}

/// Runs `pathlab tune`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let mut rate_measurement = None;
    let rate = match (args.host.as_deref(), args.rate, args.rtt) {
        (_, Some(rate), Some(_)) | (Some(_), Some(rate), None) => rate,
        (Some(host), None, _) => {
            let capacity = measure_rate(host, &args.key)?;
            let rate = BitsPerSec(capacity.bottleneck_bps().round() as u64);
            rate_measurement = Some(capacity);
            rate
        }
        (None, None, Some(_)) => {
            return Err(usage(anyhow!(
                "missing --rate: give the path's bottleneck rate (e.g. --rate 1gbit)"
            )))
        }
        (None, Some(_), None) => {
            return Err(usage(anyhow!(
                "missing --rtt: give the path's round-trip time (e.g. --rtt 170ms), or HOST, a pathlab server to measure it to"
            )))
        }
        (None, None, None) => {
            return Err(usage(anyhow!(
                "missing --rate and --rtt: give both (e.g. --rate 1gbit --rtt 170ms), or HOST and --rate to measure the RTT"
            )))
        }
    };
    let root = match &args.root {
        Some(root) => checked_root(root)?,
        None => PathBuf::from("/"),
    };
    let (rtt_ns, measurement) = match (args.rtt, args.host.as_deref()) {
        (Some(rtt), _) => (rtt.as_nanos(), None),
        (None, Some(host)) => {
            let measurement = measure_rtt(host, &args.key)?;
            (measurement.min_ns, Some(measurement))
        }
        (None, None) => unreachable!("checked above"),
    };
    let path = TunePath::new(
        rate.bits_per_sec(),
        rtt_ns,
        pathlab_core::units::MSS_BYTES as u64,
    )
    .map_err(usage)?;
    let mut report = tune::advise(&path, &read_host_settings(&root));
    report.rtt_measurement = measurement;
    report.rate_measurement = rate_measurement;
    let text = if args.output.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        tune::render_text(&report)
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        // A reader that stopped early (`| head`) wanted no more.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// `--root DIR` must be a directory holding a copy of `proc/sys` or `sys/class/net`.
fn checked_root(root: &Path) -> anyhow::Result<PathBuf> {
    if !root.is_dir() {
        return Err(usage(anyhow!(
            "--root '{}' is not a directory",
            root.display()
        )));
    }
    if !root.join("proc/sys").is_dir() && !root.join("sys/class/net").is_dir() {
        return Err(usage(anyhow!(
            "--root '{}' holds neither proc/sys nor sys/class/net: it is not a copy of a machine's settings",
            root.display()
        )));
    }
    Ok(root.to_owned())
}

/// The bottleneck from `host` to this host (what a download's window must fill), by
/// `pathlab capacity`'s packet trains and shaper stream, without the available-bandwidth
/// search.
fn measure_rate(host: &str, key: &ClientKey) -> anyhow::Result<pathlab_probe::capacity::Capacity> {
    let key = key.read()?;
    let connect = || Client::connect(host, key.clone(), Duration::from_secs(5));
    drop(connect().map_err(measure_error)?);
    let options = pathlab_probe_driver::capacity::CapacityOptions {
        available: false,
        ..pathlab_probe_driver::capacity::CapacityOptions::new(
            pathlab_probe::control::Direction::Down,
        )
    };
    let report = pathlab_probe_driver::capacity::measure(&connect, &options, &mut |_| {})
        .map_err(measure_error)?;
    Ok(report.capacity)
}

/// The RTT to `host`: the minimum of [`PROBES`] round trips, since the window must fill
/// the path without queueing (queueing adds delay, not pipe); the median is kept to show.
fn measure_rtt(host: &str, key: &ClientKey) -> anyhow::Result<RttMeasurement> {
    let key = key.read()?;
    let client = Client::connect(host, key, Duration::from_secs(5)).map_err(measure_error)?;
    let report = client
        .round_trip(PROBE_INTERVAL, PROBE_BYTES, PROBES)
        .map_err(measure_error)?;
    if report.replies == 0 {
        return Err(anyhow!(
            "{host} answered none of {PROBES} round-trip probes: no RTT to tune for"
        ));
    }
    Ok(RttMeasurement {
        host: host.to_owned(),
        probes: report.sent,
        replies: report.replies,
        interval_ns: PROBE_INTERVAL.as_nanos() as u64,
        min_ns: report.rtt.min_ns,
        median_ns: report.rtt.p50_ns,
    })
}

/// Reads every setting [`tune::advise`] looks at from under `root` (`/` for this host).
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
