//! `pathlab rtt`: isochronous round trips, as irtt does them.

use std::io::Write as _;

use pathlab_core::format::{self, Digits};
use pathlab_probe::rtt::{OffsetBasis, Percentiles, RttReport};
use pathlab_probe_driver::rtt::{self, RttConfig};
use pathlab_results::RunResult;

use crate::chart;

/// Arguments of `pathlab rtt`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub server: crate::cmd::args::ServerAddress,
    /// Interval between requests.
    #[arg(short = 'i', long, value_name = "TIME", default_value = "10ms", value_parser = crate::cmd::parse_time)]
    pub interval: pathlab_core::Duration,
    #[command(flatten)]
    pub duration: crate::cmd::args::TestTime,
    /// UDP payload bytes per request (replies are the same size).
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: u32,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// What a saved `rtt` run that failed part way holds.
const PARTIAL: &str = "every request sent and every reply received until the failure; the \
server's count of the requests it received never came, so reflector_received is what the \
replies prove and every loss counts as lost on the way up";

impl Args {
    /// What to measure.
    fn config(&self) -> anyhow::Result<RttConfig> {
        let interval = self.interval.into();
        Ok(RttConfig {
            target: self.client.target(&self.server.host)?,
            interval,
            probe_bytes: self.size,
            count: RttConfig::count_for(self.duration.time.into(), interval),
        })
    }
}

/// Runs `pathlab rtt`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let report =
        args.client
            .measure(("rtt", PARTIAL), RunResult::Rtt, &args.config()?, rtt::run)?;
    if args.client.output.json {
        let mut printed = report;
        printed.series.clear();
        println!("{}", serde_json::to_string_pretty(&printed)?);
    } else {
        print(&report)?;
    }
    Ok(())
}

fn row(out: &mut impl std::io::Write, name: &str, p: &Percentiles) -> std::io::Result<()> {
    writeln!(
        out,
        "  {name:<10} min {:>9}  p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}  mean {:>9} ms",
        format::in_millis(p.min_ns as f64 * 1e-9, Digits::fixed(3)),
        format::in_millis(p.p50_ns as f64 * 1e-9, Digits::fixed(3)),
        format::in_millis(p.p90_ns as f64 * 1e-9, Digits::fixed(3)),
        format::in_millis(p.p99_ns as f64 * 1e-9, Digits::fixed(3)),
        format::in_millis(p.max_ns as f64 * 1e-9, Digits::fixed(3)),
        format::in_millis(p.mean_ns * 1e-9, Digits::fixed(3))
    )
}

fn print(r: &RttReport) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} requests, {} replies: lost {} up ({}), {} down ({}), {} duplicates",
        r.sent,
        r.replies,
        r.lost_up,
        format::fraction_as_percent(r.lost_up as f64 / r.sent.max(1) as f64, Digits::fixed(2)),
        r.lost_down,
        format::fraction_as_percent(r.lost_down as f64 / r.sent.max(1) as f64, Digits::fixed(2)),
        r.duplicates
    )?;
    if r.reflector_dropped > 0 {
        writeln!(
            out,
            "the server dropped {} requests that came faster than the test's rate (not counted as loss)",
            r.reflector_dropped
        )?;
    }
    row(&mut out, "round trip", &r.rtt)?;
    // The client's send and receive; the server's hold time, taken out, is its own clock's.
    writeln!(out, "  {:<10} {}", "clock", r.timed_by.describe())?;
    row(&mut out, "up", &r.up)?;
    row(&mut out, "down", &r.down)?;
    let basis = match r.offset_basis {
        OffsetBasis::ClocksAgree => {
            "no probe contradicts agreeing clocks, so the split is as measured".to_owned()
        }
        OffsetBasis::Corrected => format!(
            "the server's clock is off by at least {} ms; the split is a bound",
            format::in_millis(
                r.clock_offset_ns.unsigned_abs() as f64 * 1e-9,
                Digits::fixed(3)
            )
        ),
    };
    writeln!(out, "  one-way split: {basis}")?;
    row(&mut out, "send late", &r.send_error)?;
    let rtts: Vec<f64> = r.series.iter().map(|s| s.1 as f64).collect();
    chart::write_over_time(&mut out, "round trip", &rtts)?;
    Ok(())
}
