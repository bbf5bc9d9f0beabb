//! `pathlab owd`: one-way delay probing, as the seed's link-aggregation probe does it.

use std::io::Write as _;

use pathlab_core::format::{self, Digits};
use pathlab_probe::control::Direction;
use pathlab_probe::owd::{OneWayResult, QueueVerdict};
use pathlab_probe_driver::owd::{self, OwdConfig, OwdEvent};

use crate::cmd::client::Progress;
use crate::{chart, usage};

/// Arguments of `pathlab owd`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub server: crate::cmd::args::ServerAddress,
    /// Probe rate (UDP payload), e.g. 10M or 1.5mbit.
    #[arg(long, value_name = "RATE", default_value = "1M")]
    pub rate: String,
    /// UDP payload bytes per probe.
    #[arg(long, value_name = "BYTES", default_value_t = 1200)]
    pub size: u32,
    /// How many probes (instead of -t).
    #[arg(long, value_name = "N", conflicts_with = "time")]
    pub count: Option<u64>,
    #[command(flatten)]
    pub duration: crate::cmd::args::TestTime,
    /// Which way: up (to the server), down (from it), or both in turn.
    #[arg(long, value_parser = ["up", "down", "both"], default_value = "up")]
    pub direction: String,
    /// Packets per window of the queue verdict's trend test (the deviation is taken from
    /// the least delay of the whole run, the clock drift removed).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub window: usize,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// A sender later than this at its 99th percentile gets a note in the text output.
const LATE_NOTE_NS: u64 = 1_000_000;

/// What a saved `owd` run that failed part way holds.
const PARTIAL: &str = "the directions that finished; a downward test cut short keeps the \
probes received until then, counted as sent up to the highest sequence number received (the \
server's own count never came); an upward one keeps nothing (the server's records of what \
arrived come at the end of the test)";

impl Args {
    /// What to measure, checked: a usage error names the option that will not do.
    fn config(&self) -> anyhow::Result<OwdConfig> {
        let rate = pathlab_core::spec::parse_rate(&self.rate).map_err(usage)?;
        if self.size < OwdConfig::MIN_PROBE_BYTES {
            return Err(usage(anyhow::anyhow!(
                "--size must be at least {} bytes (the probe header), got {}",
                OwdConfig::MIN_PROBE_BYTES,
                self.size
            )));
        }
        let count = self
            .count
            .unwrap_or_else(|| OwdConfig::count_for(self.duration.time.into(), rate, self.size));
        let directions = crate::cmd::args::directions(&self.direction);
        Ok(OwdConfig {
            target: self.client.target(&self.server.host)?,
            rate,
            probe_bytes: self.size,
            count,
            directions,
            window: self.window,
        })
    }
}

/// Runs `pathlab owd`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let mut progress = None;
    let results = owd::run(&config, &mut |OwdEvent::Started { direction, length }| {
        // The line of the direction before is erased before the next one's is drawn.
        progress = None;
        progress = Progress::start(
            match direction {
                Direction::Up => "owd up",
                Direction::Down => "owd down",
            },
            length,
        );
    })
    .map_err(|partial| {
        args.client.failed(partial, PARTIAL, |results| {
            pathlab_results::RunResult::Owd(*results)
        })
    })?;
    drop(progress);
    args.client
        .save(|| pathlab_results::RunResult::Owd(results.clone()))?;
    if args.client.output.json {
        let mut printed: Vec<OneWayResult> = results;
        for result in &mut printed {
            result.owd.series.clear();
        }
        println!("{}", serde_json::to_string_pretty(&printed)?);
    } else {
        print(&results)?;
    }
    Ok(())
}

fn print(results: &[OneWayResult]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for r in results {
        let direction = match r.direction {
            Direction::Up => "up (to the server)",
            Direction::Down => "down (from the server)",
        };
        let s = &r.sequence;
        writeln!(
            out,
            "{direction}: {} probes sent of {} bytes, asked for {}",
            s.sent,
            r.size,
            format::rate(r.rate_bps as f64, Digits::fixed(2))
        )?;
        writeln!(
            out,
            "  sent at      {} ({:.0} packets/s)",
            format::rate(r.achieved_rate_bps, Digits::fixed(2)),
            r.achieved_pps
        )?;
        let kept_up = r.achieved_rate_bps / r.rate_bps.max(1) as f64;
        if kept_up < 0.98 {
            writeln!(
                out,
                "  note         the sender reached only {} of the rate asked (its CPU or socket was the limit); what follows is for the rate sent",
                format::fraction_as_percent(kept_up, Digits::fixed(2))
            )?;
        }
        let late = r.send_lateness;
        if late.p99_ns > LATE_NOTE_NS {
            writeln!(
                out,
                "  note         the sender ran late: p99 {} ms, max {} ms behind its schedule; what fell due meanwhile went together, so deviations up to that may be the sender's, not the path's",
                format::in_millis(late.p99_ns as f64 * 1e-9, Digits::fixed(3)),
                format::in_millis(late.max_ns as f64 * 1e-9, Digits::fixed(3)),
            )?;
        }
        writeln!(
            out,
            "  lost         {} ({}), duplicates {}, reordered {} ({}, extent up to {}){}",
            s.lost,
            format::fraction_as_percent(s.lost as f64 / s.sent.max(1) as f64, Digits::fixed(2)),
            s.duplicates,
            s.reordered,
            format::fraction_as_percent(s.reordered_ratio, Digits::fixed(2)),
            s.max_extent,
            if r.rejected > 0 {
                format!(", {} rejected", r.rejected)
            } else {
                String::new()
            }
        )?;
        let o = &r.owd;
        let ms = |ns: f64| format::in_millis(ns * 1e-9, Digits::fixed(3));
        writeln!(out, "  jitter       {} ms (RFC 3550)", ms(o.jitter_ns))?;
        writeln!(
            out,
            "  deviation    p50 {} ms, p95 {} ms, max {} ms (from the least delay of the run)",
            ms(o.deviation_p50_ns as f64),
            ms(o.deviation_p95_ns as f64),
            ms(o.deviation_max_ns as f64),
        )?;
        writeln!(
            out,
            "  trend        {:+.1} us/s (95% CI +-{:.1}), {}, delay rose {} ms",
            o.trend_us_per_s,
            o.trend_ci95_us_per_s,
            if o.clock_drift_implausible {
                "no clock drift removed (the lowest delays moved faster than a clock drifts: a queue)".to_owned()
            } else {
                format!(
                    "clock drift {:+.1} ppm removed (from the lowest delays)",
                    o.clock_drift_ppm
                )
            },
            ms(o.queue_growth_ns as f64)
        )?;
        let verdict = match o.verdict {
            QueueVerdict::Building => "a queue is building along the path: the probes arrive later and later (offered rate above what the path carries?)",
            QueueVerdict::NotBuilding => "no queue building: the path carries this rate",
            QueueVerdict::Unknown => QueueVerdict::Unknown.text(),
        };
        writeln!(out, "  verdict      {verdict}")?;
        let deviations: Vec<f64> = o.series.iter().map(|s| s.1 as f64).collect();
        chart::write_over_time(&mut out, "deviation", &deviations)?;
    }
    Ok(())
}
