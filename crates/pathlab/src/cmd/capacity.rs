//! `pathlab capacity`: the bottleneck's capacity from packet dispersion and the available
//! bandwidth from self-loading streams (the pathrate and pathload ideas).

use std::io::Write as _;

use pathlab_core::format::{self, Digits};
use pathlab_probe::capacity::CapacityReport;
use pathlab_probe::control::Direction;
use pathlab_probe::shaper;
use pathlab_probe_driver::capacity::CapacityOptions;

use crate::cmd::client::measure_error;
use crate::usage;

/// Arguments of `pathlab capacity`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub server: crate::cmd::args::ServerAddress,
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
    /// Most bytes of the constant-rate stream that looks for a token bucket (a shaper or
    /// policer) after the trains: buckets larger than about this are not seen.
    #[arg(long, value_name = "SIZE", default_value = "10mb", value_parser = parse_budget)]
    pub shaper_budget: u64,
    /// Send no shaper stream: the capacity is the packet trains' alone.
    #[arg(long)]
    pub no_shaper: bool,
    /// Highest rate any probe stream is sent at (the server's own bound applies too);
    /// pairs and trains average at most half of it.
    #[arg(long, value_name = "RATE", value_parser = crate::cmd::parse_rate)]
    pub max_rate: Option<pathlab_core::units::BitsPerSec>,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// What a saved `capacity` run that failed part way holds.
const PARTIAL: &str = "the directions that finished (done), and the steps of the one that \
failed that had finished (interrupted: the path MTU, the pairs' estimates, the capacity, the \
available bandwidth's bracket from the fleets that finished)";

/// The least `--max-rate`: 100 kbit/s, a probe of 1500 bytes every 120 ms.
const MIN_MAX_RATE_BPS: u64 = 100_000;

/// A shaper stream's budget: a size (`10mb`, powers of 1024) within
/// [`shaper::BUDGET_BYTES`].
fn parse_budget(text: &str) -> Result<u64, String> {
    let bytes = pathlab_core::spec::parse_size(text).map_err(|e| e.to_string())?;
    if !shaper::BUDGET_BYTES.contains(&bytes) {
        return Err(format!(
            "{text} is outside {} to {}",
            format::bytes_binary(*shaper::BUDGET_BYTES.start(), Digits::up_to(2)),
            format::bytes_binary(*shaper::BUDGET_BYTES.end(), Digits::up_to(2))
        ));
    }
    Ok(bytes)
}

/// Runs `pathlab capacity`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    check_args(args)?;
    let directions: &[Direction] = match args.direction.as_str() {
        "up" => &[Direction::Up],
        "down" => &[Direction::Down],
        _ => &[Direction::Up, Direction::Down],
    };
    let key = args.client.key.read()?;
    let connect = || {
        pathlab_probe_driver::Client::connect(
            &args.server.host,
            key.clone(),
            pathlab_probe_driver::CONNECT_TIMEOUT,
        )
    };
    // Connect once first, so a wrong host or key fails before anything is sent.
    let limit = connect().map_err(measure_error)?.limits.max_rate_bps as f64;
    let max_rate = args
        .max_rate
        .map_or(limit, |rate| (rate.bits_per_sec() as f64).min(limit));
    let start = probing_text(args, max_rate);
    if args.client.output.json {
        eprintln!("{start}");
    } else {
        println!("{start}");
    }
    let mut reports = Vec::new();
    for &direction in directions {
        let options = CapacityOptions {
            pairs: args.pairs,
            trains: args.trains,
            streams: args.streams,
            available: !args.no_available,
            shaper_budget: (!args.no_shaper).then_some(args.shaper_budget),
            max_rate_bps: Some(max_rate),
            ..CapacityOptions::new(direction)
        };
        let json = args.client.output.json;
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
    if args.client.output.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print(&reports)?;
    }
    Ok(())
}

/// Refuses, as a usage error, too few pairs, trains or streams to estimate from, and a
/// `--max-rate` below [`MIN_MAX_RATE_BPS`].
fn check_args(args: &Args) -> anyhow::Result<()> {
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
    if let Some(rate) = args.max_rate {
        if rate.bits_per_sec() < MIN_MAX_RATE_BPS {
            return Err(usage(anyhow::anyhow!(
                "--max-rate {} is too low: probes need at least {}",
                format::rate(rate.bits_per_sec() as f64, Digits::up_to(2)),
                format::rate(MIN_MAX_RATE_BPS as f64, Digits::up_to(2))
            )));
        }
    }
    Ok(())
}

/// What the run will send, said before it starts: the highest probe rate (`max_rate`,
/// bits/s) and whether a shaper stream follows the trains, with its budget.
fn probing_text(args: &Args, max_rate: f64) -> String {
    let shaper = if args.no_shaper {
        "no shaper stream (--no-shaper)".to_owned()
    } else {
        format!(
            "after the trains, a constant-rate stream at the capacity of up to {} a direction \
             (--shaper-budget), to find a token bucket; once more after a rest of up to 5 s \
             where the trains may have drained one",
            format::bytes_binary(args.shaper_budget, Digits::up_to(2))
        )
    };
    format!(
        "probes at most {} (--max-rate, and the server's bound); {shaper}",
        format::rate(max_rate, Digits::up_to(2))
    )
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
        if let Some(shaper) = &c.shaper {
            writeln!(out, "{}: {}", r.direction.name(), shaper.describe())?;
            if shaper.shaped() {
                writeln!(
                    out,
                    "{}: bottleneck {} at the IP layer, the bucket's sustained rate: the capacity above is the link beneath it",
                    r.direction.name(),
                    format::rate(c.bottleneck_bps(), Digits::fixed(2)),
                )?;
            }
        }
        if let Some(a) = &r.available {
            writeln!(
                out,
                "{}: available {} (between {} and {}, {} of the bottleneck)",
                r.direction.name(),
                format::rate(a.available_bps, Digits::fixed(2)),
                format::rate(a.low_bps, Digits::fixed(2)),
                format::rate(a.high_bps, Digits::fixed(2)),
                format::fraction_as_percent(a.available_bps / c.bottleneck_bps(), Digits::fixed(2))
            )?;
        }
    }
    Ok(())
}
