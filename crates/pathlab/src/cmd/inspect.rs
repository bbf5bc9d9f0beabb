//! `pathlab inspect`: what limits the live TCP transfers of any program, from what the
//! kernel says about their sockets (NETLINK_SOCK_DIAG), sampled every interval, with a
//! verdict a user acts on at the end.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context};
use pathlab_core::format::{self, Digits};
use pathlab_diagnose::diagnosis::{InspectReport, Interval, Selector, Watch};
use pathlab_probe_driver::inspect::{self, InspectConfig, InspectError, Namespace};

use crate::usage;

/// Arguments of `pathlab inspect`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
FILTER is in ss's words: `dport = :22`, `sport 5201`, `port 443`, `dst 198.18.0.0/15`, \
`src ADDR`, joined by `and`. Without --pid, --port or FILTER every TCP connection of the \
network namespace is watched; live rows show those that moved data.

Each row: what the connection moved in the interval, its congestion window (segments), \
slow-start threshold, the peer's advertised window, bytes in flight, smoothed RTT and \
its variation, segments retransmitted, send and receive queues, and where the time went: \
blocked by the receiver's window / by the send buffer / paced by congestion control / \
waiting for the application (the kernel's tcpi_rwnd_limited, tcpi_sndbuf_limited and \
tcpi_busy_time, Linux 4.10 and later).

With -J no rows are printed: the whole watch comes at the end, as JSON, instead of the \
table and verdicts.

The kernel shows every socket's tcp_info to any user. Finding another user's process's \
sockets (--pid) needs root, and so does looking into another network namespace (--netns, \
or --pid of a process in one).")]
pub struct Args {
    /// Only the sockets of process PID (in its network namespace).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Only connections with port N at either end.
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Look in the network namespace NAME (/run/netns/NAME), as `ip netns exec` does.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// How often to look.
    #[arg(short = 'i', long, value_name = "TIME", default_value = "1s", value_parser = crate::cmd::parse_time)]
    pub interval: pathlab_core::Duration,
    /// How long to watch (default: until Ctrl-C, or until --pid's process ends).
    #[arg(short = 't', long, value_name = "TIME", value_parser = crate::cmd::parse_time)]
    pub time: Option<pathlab_core::Duration>,
    #[command(flatten)]
    pub output: crate::cmd::args::JsonOutput,
    /// Save the watch (every interval of every connection, and the verdicts) to FILE, for
    /// `pathlab report`.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Which connections, in ss's filter words (see below).
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    pub filter: Vec<String>,
}

impl Args {
    /// What to watch, checked: a usage error names the option that will not do.
    fn config(&self) -> anyhow::Result<InspectConfig> {
        if self.pid.is_some() && self.netns.is_some() {
            return Err(usage(anyhow!(
                "give --pid or --netns, not both: --pid looks in its process's namespace"
            )));
        }
        let mut selector =
            Selector::parse(&self.filter.join(" ")).map_err(|e| usage(anyhow!("FILTER: {e}")))?;
        if let Some(port) = self.port {
            selector = selector.and(Selector::port(port));
        }
        Ok(InspectConfig {
            selector,
            pid: self.pid,
            namespace: match (&self.netns, self.pid) {
                (Some(name), _) => Namespace::Named(name.clone()),
                (None, Some(_)) => Namespace::Process,
                (None, None) => Namespace::Own,
            },
            interval: self.interval.into(),
            time: self.time.map(Into::into),
        })
    }
}

/// Runs `pathlab inspect`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let mut rows = 0usize;
    let report = inspect::run(&config, &mut |look| {
        if !args.output.json {
            print_rows(look.watch, look.intervals, &mut rows, look.at);
        }
    })
    .map_err(|error| match error {
        InspectError::OpenNamespace { .. } | InspectError::ProcessSockets { first: true, .. } => {
            usage(error)
        }
        other => anyhow::Error::new(other),
    })?;
    if let Some(path) = &args.save {
        save(path, &report)?;
    }
    if args.output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_verdicts(&report);
    }
    Ok(())
}

const HEADER: &str = "    time  connection                                         moved          cwnd  ssthresh  peer wnd  in flight   srtt/rttvar ms  retr    send-q    recv-q  rwnd/sndbuf/cwnd/app %";

/// One row per connection that moved data in the interval.
fn print_rows(watch: &Watch, intervals: &[(usize, Interval)], rows: &mut usize, at: Duration) {
    let mut out = std::io::stdout().lock();
    for (index, i) in intervals {
        let name = watch.last(*index).name();
        if i.throughput_bps == 0.0 && i.in_flight_bytes == 0 && i.retrans_segments == 0 {
            continue;
        }
        if rows.is_multiple_of(20) {
            let _ = writeln!(out, "{HEADER}");
        }
        *rows += 1;
        let limits = if i.sending {
            format!(
                "{:3.0}/{:3.0}/{:3.0}/{:3.0}",
                i.limits.receiver_window * 100.0,
                i.limits.send_buffer * 100.0,
                i.limits.congestion * 100.0,
                i.limits.application * 100.0
            )
        } else {
            "receiving".to_owned()
        };
        // A receiving end's congestion window and flight say nothing: dashes.
        let sender = |text: String| if i.sending { text } else { "-".to_owned() };
        let _ = writeln!(
            out,
            "{:8.2}  {name:49}  {:>13}  {:>5}  {:>8}  {:>8}  {:>9}  {:>14}  {:>4}  {:>8}  {:>8}  {limits}",
            at.as_secs_f64(),
            format::rate(i.throughput_bps, Digits::up_to(2)),
            sender(i.cwnd.to_string()),
            sender(i.ssthresh.map_or_else(|| "-".to_owned(), |s| s.to_string())),
            sender(format::bytes_binary(u64::from(i.peer_window), Digits::up_to(2))),
            sender(format::bytes_binary(i.in_flight_bytes, Digits::up_to(2))),
            format!(
                "{}/{}",
                format::in_millis(f64::from(i.srtt_us) * 1e-6, Digits::fixed(1)),
                format::in_millis(f64::from(i.rttvar_us) * 1e-6, Digits::fixed(1))
            ),
            i.retrans_segments,
            format::bytes_binary(u64::from(i.send_queue), Digits::up_to(2)),
            format::bytes_binary(u64::from(i.recv_queue), Digits::up_to(2)),
        );
    }
}

/// The verdict of every connection that moved data; how many did not.
fn print_verdicts(report: &InspectReport) {
    let mut idle = 0;
    println!();
    for connection in &report.connections {
        let verdict = &connection.verdict;
        if verdict.limit == pathlab_diagnose::diagnosis::Limit::Idle {
            idle += 1;
            continue;
        }
        let last = &connection.last;
        println!(
            "{}{}{}:\n  {}",
            last.name(),
            last.congestion
                .as_deref()
                .map_or_else(String::new, |c| format!(" ({c})")),
            if connection.closed { ", closed" } else { "" },
            verdict.sentence
        );
    }
    if report.connections.is_empty() {
        println!("no TCP connection matched");
    } else if idle > 0 {
        println!("{idle} other connection(s) matched and moved no data");
    }
}

fn save(path: &Path, report: &InspectReport) -> anyhow::Result<()> {
    let file = crate::cmd::client::result_file(pathlab_results::RunResult::Inspect(Box::new(
        report.clone(),
    )));
    std::fs::write(path, file.to_json()).with_context(|| format!("writing {}", path.display()))
}
