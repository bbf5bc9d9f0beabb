//! `pathlab capacity`: the bottleneck's capacity from packet dispersion and the available
//! bandwidth from self-loading streams (the pathrate and pathload ideas).

use std::io::Write as _;

use pathlab_core::format::{self, Digits};
use pathlab_probe::capacity::CapacityReport;
use pathlab_probe::control::Direction;
use pathlab_probe_driver::capacity::CapacityOptions;

use crate::cmd::client::measure_error;
use crate::usage;

/// Arguments of `pathlab capacity`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pathlab server (NAME or ADDRESS, optionally :PORT).
    #[arg(value_name = "HOST")]
    pub host: String,
    /// Which way: up (to the server), down (from it), or both in turn.
    #[arg(long, value_parser = ["up", "down", "both"], default_value = "both")]
    pub direction: String,
    /// Packet pairs to send (the capacity's mode).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub pairs: u32,
    /// Packet trains to send (the capacity's median).
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub trains: u32,
    /// Streams per rate in the available-bandwidth search.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub streams: u32,
    /// Measure the capacity only, not the available bandwidth.
    #[arg(long)]
    pub no_available: bool,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// What a saved `capacity` run that failed part way holds.
const PARTIAL: &str = "the directions that finished (done), and the steps of the one that \
failed that had finished (interrupted: the path MTU, the pairs' estimates, the capacity, the \
available bandwidth's bracket from the fleets that finished)";

/// Runs `pathlab capacity`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    for (name, value, least) in [
        ("--pairs", args.pairs, 10),
        ("--trains", args.trains, 5),
        ("--streams", args.streams, 1),
    ] {
        if value < least {
            return Err(usage(anyhow::anyhow!(
                "{name} must be at least {least}, got {value}"
            )));
        }
    }
    let directions: &[Direction] = match args.direction.as_str() {
        "up" => &[Direction::Up],
        "down" => &[Direction::Down],
        _ => &[Direction::Up, Direction::Down],
    };
    let key = crate::cmd::server::read_key(args.client.psk.as_deref())?;
    let connect = || {
        pathlab_probe_driver::Client::connect(
            &args.host,
            key.clone(),
            pathlab_probe_driver::CONNECT_TIMEOUT,
        )
    };
    // Connect once first, so a wrong host or key fails before anything is sent.
    drop(connect().map_err(measure_error)?);
    let mut reports = Vec::new();
    for &direction in directions {
        let options = CapacityOptions {
            pairs: args.pairs,
            trains: args.trains,
            streams: args.streams,
            available: !args.no_available,
            ..CapacityOptions::new(direction)
        };
        let json = args.client.json;
        let mut log = |line: &str| {
            if !json {
                println!("{}: {line}", direction.name());
            }
        };
        match pathlab_probe_driver::capacity::measure_or_partial(&connect, &options, &mut log) {
            Ok(report) => reports.push(report),
            Err(partial) => {
                let step = partial
                    .measured
                    .as_ref()
                    .map_or("path MTU", |progress| progress.running_step());
                let error =
                    measure_error(partial.error).context(format!("{}: {step}", direction.name()));
                if reports.is_empty() && partial.measured.is_none() {
                    return Err(error);
                }
                return Err(args.client.save_partial(
                    error,
                    PARTIAL,
                    pathlab_results::RunResult::CapacityPartial(Box::new(
                        pathlab_results::CapacityPartial {
                            done: reports,
                            interrupted: partial.measured.map(|measured| *measured),
                        },
                    )),
                ));
            }
        }
    }
    args.client
        .save(|| pathlab_results::RunResult::Capacity(reports.clone()))?;
    if args.client.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print(&reports)?;
    }
    Ok(())
}

fn print(reports: &[CapacityReport]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for r in reports {
        let c = &r.capacity;
        writeln!(
            out,
            "{}: capacity {} (95% CI {} to {}) at the IP layer, {} counting Ethernet headers; {} probes",
            r.direction.name(),
            format::rate(c.capacity_bps, Digits::fixed(2)),
            format::rate(c.low_bps, Digits::fixed(2)),
            format::rate(c.high_bps, Digits::fixed(2)),
            format::rate(c.frame_capacity_bps, Digits::fixed(2)),
            r.probes
        )?;
        if let Some(a) = &r.available {
            writeln!(
                out,
                "{}: available {} (between {} and {}, {} of the capacity)",
                r.direction.name(),
                format::rate(a.available_bps, Digits::fixed(2)),
                format::rate(a.low_bps, Digits::fixed(2)),
                format::rate(a.high_bps, Digits::fixed(2)),
                format::fraction_as_percent(a.available_bps / c.capacity_bps, Digits::fixed(2))
            )?;
        }
    }
    Ok(())
}
