//! `pathlab capacity`: the bottleneck's capacity from packet dispersion and the available
//! bandwidth from self-loading streams (the pathrate and pathload ideas).

use std::io::Write as _;

use pathlab_core::format::{self, Digits};
use pathlab_probe::capacity::CapacityReport;
use pathlab_probe::shaper;
use pathlab_probe_driver::capacity::{self, CapacityConfig, CapacityEvent};

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

impl Args {
    /// What to measure, checked: a usage error names the option that will not do.
    fn config(&self) -> anyhow::Result<CapacityConfig> {
        check_args(self)?;
        let directions = crate::cmd::args::directions(&self.direction);
        Ok(CapacityConfig {
            target: self.client.target(&self.server.host)?,
            directions,
            pairs: self.pairs,
            trains: self.trains,
            streams: self.streams,
            available: !self.no_available,
            shaper_budget: (!self.no_shaper).then_some(self.shaper_budget),
            max_rate: self.max_rate,
        })
    }
}

/// Runs `pathlab capacity`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let json = args.client.output.json;
    let reports = capacity::run(&config, &mut |event| match event {
        CapacityEvent::Probing { max_rate_bps } => {
            let start = probing_text(args, max_rate_bps);
            if json {
                eprintln!("{start}");
            } else {
                println!("{start}");
            }
        }
        CapacityEvent::Step { direction, line } => {
            if !json {
                println!("{}: {line}", direction.name());
            }
        }
    })
    .map_err(|failure| {
        let measured_anything = failure.measured_anything();
        let error = measure_error(failure.error);
        let Some(direction) = failure.direction else {
            return error;
        };
        let error = error.context(format!("{}: {}", direction.name(), failure.step));
        if !measured_anything {
            return error;
        }
        args.client.save_partial(
            error,
            PARTIAL,
            pathlab_results::RunResult::CapacityPartial(Box::new(
                pathlab_results::CapacityPartial {
                    done: failure.done,
                    interrupted: failure.interrupted.map(|measured| *measured),
                },
            )),
        )
    })?;
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
