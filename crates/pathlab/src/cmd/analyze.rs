//! `pathlab analyze`: what each TCP connection in a packet capture did and what limited
//! it, tcptrace-style, with RFC 6349's metrics and figures.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pathlab_core::format::{self, Digits};
use pathlab_diagnose::tcpflow::{
    analyze_capture, AnalyzerConfig, CaptureAnalysis, ConnectionReport, FlowReport, VantageKind,
};
use pathlab_results::report::saved::save_page;
use pathlab_results::{ResultFile, RunResult};

use crate::cmd::rfc6349::FramingArg;
use crate::usage;

/// Arguments of `pathlab analyze`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
FILE is a pcap (either byte order, microsecond or nanosecond timestamps) or pcapng capture
of Ethernet (802.1Q/QinQ tags too), Linux cooked (SLL, SLL2) or raw IP frames, IPv4 and
IPv6; snaplen-cut captures are fine (lengths come from the headers). It may be taken at
either end or in between (`pathlab emulate --pcap`): the report says which, from the two
halves of the round trip it measures.

-J prints the analysis without the plotted series (--out's result.json has them).

Example (a transfer through an emulated 20 Mbit/s line, the bottleneck counting frames):
  pathlab analyze capture.pcapng --rate 20mbit --framing frame --out analysis")]
pub struct Args {
    /// The capture.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The bottleneck's rate (e.g. 100mbit, 1G), counted as --framing says: with it, RFC
    /// 6349's Transfer Time Ratio.
    #[arg(long, value_name = "BOTTLENECK")]
    pub rate: Option<String>,
    /// What the bottleneck's rate counts besides IP: `ethernet` (38 bytes per packet, the
    /// RFC's), `frame` (the 14-byte header, as Linux, tc and pathlab emulate count), `ip`.
    #[arg(long, value_name = "FRAMING", value_enum, default_value_t = FramingArg::Ethernet)]
    pub framing: FramingArg,
    #[command(flatten)]
    pub output: crate::cmd::args::JsonOutput,
    /// Write result.json (with the series), the figures (PNG and SVG) and report.html into
    /// DIR; `pathlab report DIR/result.json` draws them again.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl Args {
    /// What the analysis is told besides the packets: the bottleneck's rate (a bad one is
    /// a usage error) and what it counts.
    fn config(&self) -> anyhow::Result<AnalyzerConfig> {
        Ok(AnalyzerConfig {
            bottleneck_bps: crate::cmd::rfc6349::bottleneck_rate(self.rate.as_deref())?,
            framing: self.framing.into(),
        })
    }
}

/// Runs `pathlab analyze`.
pub fn run(args: &Args, command_line: Vec<String>) -> anyhow::Result<()> {
    let config = args.config()?;
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))
        .map_err(usage)?;
    let analysis = analyze_capture(&bytes, config)
        .with_context(|| format!("{} is not a capture pathlab reads", args.file.display()))
        .map_err(usage)?;
    for warning in &analysis.warnings {
        eprintln!("pathlab: warning: {warning}");
    }
    if let Some(out) = &args.out {
        let created = Some(pathlab_os::unix_now_secs());
        let file = ResultFile::new(
            RunResult::Analyze(Box::new(analysis.clone())),
            command_line,
            created,
        );
        let saved = save_page(file, out)?;
        eprintln!(
            "pathlab: wrote {}, {} ({} figures as PNG and SVG)",
            saved.result.display(),
            saved.files.html.display(),
            saved.files.png.len()
        );
    }
    if args.output.json {
        let mut printed = analysis;
        for connection in &mut printed.connections {
            for flow in &mut connection.flows {
                flow.series = pathlab_diagnose::tcpflow::FlowSeries::default();
            }
        }
        println!("{}", serde_json::to_string_pretty(&printed)?);
    } else {
        print(&args.file, &analysis);
    }
    Ok(())
}

fn print(file: &Path, analysis: &CaptureAnalysis) {
    println!(
        "{}: {:?} capture, {} packets, {} TCP segments, {} connections{}",
        file.display(),
        analysis.format,
        analysis.packets,
        analysis.tcp_segments,
        analysis.connections.len(),
        if analysis.dropped_at_capture > 0 {
            format!(
                ", {} packets dropped at the capture point (the emulator's comments)",
                analysis.dropped_at_capture
            )
        } else {
            String::new()
        }
    );
    for (index, connection) in analysis.connections.iter().enumerate() {
        print_connection(index + 1, connection);
    }
}

fn print_connection(number: usize, connection: &ConnectionReport) {
    let vantage = &connection.vantage;
    let halves = match (vantage.client_half_ns, vantage.server_half_ns) {
        (Some(client), Some(server)) => format!(
            "{} ms to the client and back, {} ms to the server and back",
            format::in_millis(client as f64 * 1e-9, Digits::fixed(3)),
            format::in_millis(server as f64 * 1e-9, Digits::fixed(3))
        ),
        _ => "one half of the round trip unmeasured".to_owned(),
    };
    let place = match vantage.kind {
        VantageKind::Client => "captured at the client",
        VantageKind::Server => "captured at the server",
        VantageKind::Middle => "captured in the middle",
        VantageKind::Unknown => "capture point unknown",
    };
    println!(
        "connection {number}: {} -> {} ({}; {place}: {halves}; {} segments over {:.3} s)",
        connection.client,
        connection.server,
        if connection.handshake_seen {
            "handshake seen"
        } else {
            "no handshake"
        },
        connection.segments,
        connection.duration_ns as f64 * 1e-9,
    );
    for flow in &connection.flows {
        print_flow(flow);
    }
    for note in &connection.notes {
        println!("  note: {note}");
    }
}

fn print_flow(flow: &FlowReport) {
    println!(
        "  {} -> {}: {} bytes in {:.3} s, {}",
        flow.from,
        flow.to,
        flow.bytes,
        flow.duration_ns as f64 * 1e-9,
        format::rate(flow.goodput_bps, Digits::fixed(2))
    );
    if flow.rtt.samples > 0 {
        println!(
            "    RTT min {} ms / median {} ms / p95 {} ms ({} samples{})",
            format::in_millis(flow.rtt.min_ns as f64 * 1e-9, Digits::fixed(3)),
            format::in_millis(flow.rtt.median_ns as f64 * 1e-9, Digits::fixed(3)),
            format::in_millis(flow.rtt.p95_ns as f64 * 1e-9, Digits::fixed(3)),
            flow.rtt.samples,
            if flow.rtt.both_halves {
                ""
            } else {
                ", the capture point to the receiver and back only"
            }
        );
    }
    let r = flow.retransmissions;
    println!(
        "    retransmissions {} ({} bytes; fast {}, RTO {}, probe {}, spurious {}, lost before \
         the capture point {}), out of order {}, holes {}, dropped at the capture point {}",
        r.total,
        flow.bytes_retransmitted,
        r.fast,
        r.rto,
        r.probe,
        r.spurious,
        r.lost_before_capture,
        flow.out_of_order,
        flow.holes,
        flow.dropped_at_capture
    );
    let window = &flow.window;
    println!(
        "    window: {}, median {} B, largest {} B, {} zero-window ACKs ({} ms)",
        match window.scale {
            Some(scale) => format!("scale {scale}"),
            None => "scale unknown (unscaled)".to_owned(),
        },
        window.median_bytes,
        window.max_bytes,
        window.zero_window_acks,
        format::in_millis(window.zero_window_ns as f64 * 1e-9, Digits::fixed(3))
    );
    let metrics = flow.metrics;
    println!(
        "    RFC 6349: TCP efficiency {}, buffer delay {}, transfer time ratio {}",
        metrics
            .tcp_efficiency
            .map_or("-".to_owned(), |f| format::fraction_as_percent(
                f,
                Digits::fixed(2)
            )),
        metrics
            .buffer_delay_percent
            .map_or("-".to_owned(), |p| format::percent_as_is(
                p,
                Digits::fixed(2)
            )),
        match (metrics.transfer_time_ratio, metrics.ideal_rate_bps) {
            (Some(ratio), Some(ideal)) => format!(
                "{ratio:.3} (ideal {} at MTU {})",
                format::rate(ideal, Digits::fixed(2)),
                metrics.mtu_bytes
            ),
            _ => "- (give the bottleneck with --rate)".to_owned(),
        }
    );
    println!("    verdict: {}", flow.verdict.sentence);
}
