//! `pathlab sim`: run a path in virtual time under synthetic loads.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use pathlab_core::format::{self, Digits};
use pathlab_core::sim::{self, Load, SimConfig, SimReport};
use pathlab_core::{Duration, LinkSpec};
use pathlab_results::{ResultFile, RunResult};

use crate::cmd::spec::parse_spec;
use crate::{chart, usage};

/// Arguments of `pathlab sim`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
LOAD is KIND:RATE:SIZE[:OPTION...]:
  cbr:15mbit:1500                  constant bit rate, 1500-byte packets
  poisson:2mbit:200                Poisson arrivals at 2 Mbit/s on average
  onoff:20mbit:1500:on=1s:off=2s   20 Mbit/s bursts of 1 s every 3 s
options: start=TIME stop=TIME reverse ecn l4s

Example (bufferbloat: a 10 Mbit/s line with a 1000-packet buffer, offered 11 Mbit/s):
  pathlab sim 'delay 5ms rate 10mbit limit 1000' --load cbr:11mbit:1514 --load cbr:100kbit:100")]
pub struct Args {
    /// Forward link spec (netem syntax plus pathlab's additions).
    #[arg(value_name = "SPEC")]
    pub spec: String,
    /// Traffic to send (repeat for several loads; each is its own flow).
    #[arg(short = 'l', long = "load", value_name = "LOAD", required = true)]
    pub loads: Vec<String>,
    /// Reverse link spec (default: a perfect link).
    #[arg(long, value_name = "SPEC", default_value = "")]
    pub reverse: String,
    /// Length of the run in virtual time.
    #[arg(short = 't', long = "time", value_name = "TIME", default_value = "30s", value_parser = crate::cmd::parse_time)]
    pub time: Duration,
    /// Seed of every random choice; the same seed gives the same result.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Period of the queue-length time series.
    #[arg(long, value_name = "TIME", default_value = "10ms", value_parser = crate::cmd::parse_time)]
    pub sample: Duration,
    #[command(flatten)]
    pub output: crate::cmd::args::JsonOutput,
    /// Save the result (with its time series) to FILE for later plots.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Write the time series as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

impl Args {
    /// The simulation to run: both specs parsed (trace files loaded) and every load; a
    /// bad one is a usage error.
    fn config(&self) -> anyhow::Result<SimConfig> {
        let forward = parse_spec(std::slice::from_ref(&self.spec))?;
        let reverse: LinkSpec = parse_spec(std::slice::from_ref(&self.reverse))?;
        let loads = self
            .loads
            .iter()
            .map(|text| text.parse::<Load>().map_err(usage))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(SimConfig {
            forward,
            reverse,
            loads,
            duration: self.time,
            seed: self.seed,
            sample_every: self.sample,
        })
    }
}

/// Runs `pathlab sim`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let report = sim::run(&config).map_err(usage)?;

    if let Some(path) = &args.save {
        let created = Some(pathlab_os::unix_now_secs());
        let file = ResultFile::new(
            RunResult::Sim(Box::new(report.clone())),
            std::env::args().collect(),
            created,
        );
        std::fs::write(path, file.to_json())
            .with_context(|| format!("cannot write '{}'", path.display()))?;
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, pathlab_results::sim_samples_csv(&report))
            .with_context(|| format!("cannot write '{}'", path.display()))?;
    }
    if args.output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", human(&report));
    }
    Ok(())
}

/// The report as a table for a terminal.
fn human(report: &SimReport) -> String {
    let mut out = String::new();
    let spec = |s: &str| {
        if s.is_empty() {
            "(perfect link)".to_owned()
        } else {
            s.to_owned()
        }
    };
    let _ = writeln!(
        out,
        "{} of virtual time, seed {}\nforward: {}\nreverse: {}\n",
        report.duration,
        report.seed,
        spec(&report.forward_spec),
        spec(&report.reverse_spec),
    );
    let _ = writeln!(
        out,
        "{:<34} {:>14} {:>14} {:>8}  {:<28} {:<28}",
        "load",
        "offered",
        "delivered",
        "lost",
        "queue delay ms p50/p99/max",
        "one-way delay ms p50/p99/max"
    );
    for load in &report.loads {
        let triple = |s: &pathlab_core::sim::Summary| {
            format!(
                "{}/{}/{}",
                format::in_millis(s.p50.as_secs_f64(), Digits::fixed(3)),
                format::in_millis(s.p99.as_secs_f64(), Digits::fixed(3)),
                format::in_millis(s.max.as_secs_f64(), Digits::fixed(3))
            )
        };
        let _ = writeln!(
            out,
            "{:<34} {:>14} {:>14} {:>8}  {:<28} {:<28}",
            load.description,
            format::rate(load.offered_bps, Digits::fixed(2)),
            format::rate(load.delivered_bps, Digits::fixed(2)),
            format::fraction_as_percent(load.lost_fraction(), Digits::fixed(2)),
            triple(&load.queue_delay),
            triple(&load.owd),
        );
        if !load.dropped.is_empty() {
            let reasons: Vec<String> = load
                .dropped
                .iter()
                .map(|(reason, n)| format!("{} {n}", reason.name()))
                .collect();
            let _ = writeln!(out, "{:<34} drops: {}", "", reasons.join(", "));
        }
        if load.ce_marked > 0 {
            let _ = writeln!(out, "{:<34} CE-marked: {}", "", load.ce_marked);
        }
    }
    let queue: Vec<f64> = report
        .samples
        .iter()
        .map(|s| f64::from(s.forward_queue_packets))
        .collect();
    let peak = queue.iter().copied().fold(0.0, f64::max);
    if peak > 0.0 {
        let _ = writeln!(
            out,
            "\nforward queue, packets over time (peak {peak:.0}):\n  {}",
            chart::sparkline(&queue, 72)
        );
    }
    out
}
