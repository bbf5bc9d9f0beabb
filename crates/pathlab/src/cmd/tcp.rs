//! `pathlab tcp`: bulk TCP with iperf3's flags, per-interval throughput and TCP_INFO; with
//! `--rfc6349`, the whole RFC 6349 method ([`crate::cmd::rfc6349`]).

use std::io::Write as _;

use pathlab_core::format::{self, Digits};
use pathlab_probe::control::TcpDirection;
use pathlab_probe::tcp::{sum_intervals, StreamReport, TcpTestReport};
use pathlab_probe_driver::tcp::{self, TcpConfig};
use pathlab_probe_driver::{TcpOptions, TcpTest};
use pathlab_results::RunResult;

use crate::usage;

/// Arguments of `pathlab tcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub server: crate::cmd::args::ServerAddress,
    /// Parallel streams [default: 1]. Not with --rfc6349, which works out how many
    /// connections fill the path (RFC 6349 section 5.1).
    #[arg(short = 'P', long, value_name = "N", conflicts_with = "rfc6349")]
    pub parallel: Option<u32>,
    /// Reverse: the server sends.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once. Not with --rfc6349, which tests one direction at a time.
    #[arg(long, conflicts_with = "rfc6349")]
    pub bidir: bool,
    #[command(flatten)]
    pub duration: crate::cmd::args::TestTime,
    /// Socket buffer size (SO_SNDBUF/SO_RCVBUF) at both ends, e.g. 4M.
    #[arg(short = 'w', long, value_name = "SIZE")]
    pub window: Option<String>,
    /// Maximum segment size (TCP_MAXSEG).
    #[arg(long, value_name = "BYTES")]
    pub mss: Option<u32>,
    /// Congestion control of the senders (cubic, reno, bbr, ...).
    #[arg(short = 'C', long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Reporting interval [default: 1s]; with --rfc6349, how long each count of received
    /// bytes lasts [default: 100ms].
    #[arg(short = 'i', long, value_name = "TIME", value_parser = crate::cmd::parse_time)]
    pub interval: Option<pathlab_core::Duration>,
    /// How often the senders sample TCP_INFO.
    #[arg(long, value_name = "TIME", default_value = "10ms", value_parser = crate::cmd::parse_time)]
    pub sample: pathlab_core::Duration,
    /// Run the RFC 6349 method step by step: path MTU both ways, baseline RTT, bottleneck
    /// rate, BDP and the windows and connections it needs, steady-state TCP throughput, and
    /// the Transfer Time Ratio, TCP Efficiency and Buffer Delay Percentage.
    #[arg(long)]
    pub rfc6349: bool,
    #[command(flatten)]
    pub method: crate::cmd::rfc6349::Args,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// What a saved `tcp` run that failed part way holds.
pub const PARTIAL: &str = "this end's side of each stream until the failure: the upward \
streams' TCP_INFO samples (the server's counts of what it received never came: their bytes \
and up_bps are 0), the downward streams' bytes per interval and down_bps (the server's \
samples never came); server_cpu_s is 0. When an upward stream was starved (none of its \
data got through until the client gave up), the upward streams' bytes, bytes per interval \
and up_bps are what their senders saw acknowledged, and the starved one says for how long";

impl Args {
    /// Refuses, as a usage error, a report interval shorter than servers accept (`tcp`'s
    /// and `tcp --rfc6349`'s).
    fn check_interval(&self) -> anyhow::Result<()> {
        let shortest = pathlab_probe::session::MIN_REPORT_INTERVAL;
        if let Some(interval) = self.interval.filter(|i| *i < shortest) {
            return Err(usage(anyhow::anyhow!(
                "-i {} ns: the report interval is at least {} ms (servers refuse shorter ones)",
                interval.as_nanos(),
                shortest.as_nanos() / 1_000_000
            )));
        }
        Ok(())
    }

    /// What to measure, checked: a usage error names the option that will not do.
    fn config(&self) -> anyhow::Result<TcpConfig> {
        let window = self
            .window
            .as_deref()
            .map(|w| pathlab_core::spec::parse_size(w).map(|b| b as u32))
            .transpose()
            .map_err(usage)?;
        let test = TcpTest {
            streams: self.parallel.unwrap_or(1),
            direction: if self.bidir {
                TcpDirection::Both
            } else if self.reverse {
                TcpDirection::Down
            } else {
                TcpDirection::Up
            },
            duration: self.duration.time.into(),
            interval: self
                .interval
                .unwrap_or(pathlab_core::Duration::from_secs(1))
                .into(),
            sample_every: self.sample.into(),
            options: TcpOptions {
                window,
                mss: self.mss,
                congestion: self.congestion.clone(),
            },
        };
        Ok(TcpConfig {
            target: self.client.target(&self.server.host)?,
            test,
        })
    }
}

/// Runs `pathlab tcp`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    args.check_interval()?;
    if args.rfc6349 {
        return crate::cmd::rfc6349::run(args);
    }
    let report =
        args.client
            .measure(("tcp", PARTIAL), RunResult::Tcp, &args.config()?, tcp::run)?;
    if args.client.output.json {
        let mut printed = report;
        for stream in printed.up.iter_mut().chain(printed.down.iter_mut()) {
            stream.samples.truncate(1);
        }
        println!("{}", serde_json::to_string_pretty(&printed)?);
    } else {
        print(&report)?;
    }
    Ok(())
}

fn print(report: &TcpTestReport) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let seconds = report.interval_ns as f64 * 1e-9;
    for (name, streams) in [("up", &report.up), ("down", &report.down)] {
        if streams.is_empty() {
            continue;
        }
        let refs: Vec<&StreamReport> = streams.iter().collect();
        let sums = sum_intervals(&refs);
        writeln!(
            out,
            "{name} ({} stream{}):",
            streams.len(),
            if streams.len() == 1 { "" } else { "s" }
        )?;
        let end = streams.iter().map(|s| s.receive_ns).max().unwrap_or(0) as f64 * 1e-9;
        for (i, bytes) in sums.iter().enumerate() {
            let from = i as f64 * seconds;
            // The last interval is as long as the streams lasted into it.
            let to = ((i + 1) as f64 * seconds).min(end.max(from + 1e-9));
            writeln!(
                out,
                "  {from:6.2}-{to:6.2} s  {:10.2} MBytes  {}",
                *bytes as f64 / 1e6,
                format::rate(*bytes as f64 * 8.0 / (to - from), Digits::fixed(2))
            )?;
        }
        for stream in streams {
            let last = stream.samples.last().copied().unwrap_or_default();
            let retransmitted_fraction = if last.sent_bytes > 0 {
                last.retrans_bytes as f64 / last.sent_bytes as f64
            } else {
                0.0
            };
            writeln!(
                out,
                "  stream {}: {:.2} MBytes in {:.2} s, retransmitted {} segments ({} of bytes), last cwnd {} x {} B, srtt {} ms",
                stream.index,
                stream.bytes as f64 / 1e6,
                stream.receive_ns as f64 * 1e-9,
                last.retrans_segments,
                format::fraction_as_percent(retransmitted_fraction, Digits::fixed(2)),
                last.cwnd,
                last.mss,
                format::in_millis(f64::from(last.srtt_us) * 1e-6, Digits::fixed(3))
            )?;
        }
    }
    writeln!(
        out,
        "total: up {}, down {}",
        format::rate(report.up_bps, Digits::fixed(2)),
        format::rate(report.down_bps, Digits::fixed(2))
    )?;
    writeln!(
        out,
        "cpu: client {:.2} s, server {:.2} s",
        report.client_cpu_s, report.server_cpu_s
    )?;
    Ok(())
}
