//! `pathlab tcp HOST --rfc6349`: the RFC 6349 method, each step printed as it ends.

use std::io::Write as _;
use std::time::Duration;

use pathlab_core::format::{self, Digits};
use pathlab_probe::control::TcpDirection;
use pathlab_probe::mtu::PathMtu;
use pathlab_probe::rfc6349::{
    Baseline, Framing, KernelSettings, PhaseResult, Plan, Rfc6349Report, SlowStartEnd, WindowLimit,
};
use pathlab_probe_driver::rfc6349::{
    self as method, Event, Rfc6349Config, Rfc6349Error, Rfc6349Options,
};

use crate::cmd::client::{measure_error, Progress};
use crate::usage;

/// The options only `--rfc6349` uses (flattened into `tcp`'s, whose struct is also called
/// `Args`: without `group(skip)` both derive an argument group of that name, and clap's
/// debug assertions stopped every debug build of `pathlab tcp`).
#[derive(Debug, clap::Args)]
#[group(skip)]
pub struct Args {
    /// The bottleneck's rate (e.g. 100mbit, 1G), counted as --framing says; measured with
    /// packet trains (as `pathlab capacity` does) when not given.
    #[arg(long, value_name = "BOTTLENECK", requires = "rfc6349")]
    pub rate: Option<String>,
    /// What the bottleneck's rate counts besides IP: `ethernet` (preamble, header, FCS,
    /// inter-frame gap: 38 bytes, the RFC's physical Ethernet), `frame` (the 14-byte header,
    /// as Linux, tc, netem and pathlab emulate count), `ip` (nothing).
    #[arg(long, value_name = "FRAMING", value_enum, default_value_t = FramingArg::Ethernet, requires = "rfc6349")]
    pub framing: FramingArg,
    /// The bottleneck's frames carry an 802.1Q VLAN tag (4 bytes more per packet).
    #[arg(long, requires = "rfc6349")]
    pub vlan: bool,
    /// The idle period whose smallest round trip is the baseline RTT (probed every 10 ms).
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = crate::cmd::parse_time, requires = "rfc6349")]
    pub idle: pathlab_core::Duration,
}

/// `--framing` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FramingArg {
    /// Physical Ethernet: 38 bytes per packet.
    Ethernet,
    /// The Ethernet header only: 14 bytes.
    Frame,
    /// IP packets only.
    Ip,
}

impl From<FramingArg> for Framing {
    fn from(arg: FramingArg) -> Framing {
        match arg {
            FramingArg::Ethernet => Framing::Ethernet,
            FramingArg::Frame => Framing::Frame,
            FramingArg::Ip => Framing::Ip,
        }
    }
}

/// Time between the baseline's round-trip probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// UDP payload of each baseline probe, bytes (as `pathlab rtt`).
const PROBE_BYTES: u32 = 64;
/// The receivers' counting interval unless `-i` says otherwise.
const COUNT_INTERVAL: Duration = Duration::from_millis(100);

/// `--rate`, the bottleneck's rate, in bits/s: above zero, or a usage error.
pub fn bottleneck_rate(rate: Option<&str>) -> anyhow::Result<Option<f64>> {
    let Some(rate) = rate else { return Ok(None) };
    let bps = pathlab_core::spec::parse_rate(rate)
        .map_err(usage)?
        .as_f64();
    if bps <= 0.0 {
        return Err(usage(anyhow::anyhow!(
            "--rate {rate}: the bottleneck rate must be above zero"
        )));
    }
    Ok(Some(bps))
}

/// What to measure, from what the user typed, checked: a usage error names the option
/// that will not do.
fn config(args: &crate::cmd::tcp::Args) -> anyhow::Result<Rfc6349Config> {
    let rate_bps = bottleneck_rate(args.method.rate.as_deref())?;
    let window = match args.window.as_deref() {
        Some(text) => {
            let bytes = pathlab_core::spec::parse_size(text).map_err(usage)?;
            Some(
                u32::try_from(bytes)
                    .map_err(|_| usage(anyhow::anyhow!("-w {text}: a window is at most 4 GiB")))?,
            )
        }
        None => None,
    };
    if args.mss == Some(0) {
        return Err(usage(anyhow::anyhow!(
            "--mss 0: give a segment size in bytes"
        )));
    }
    let mut options = Rfc6349Options::new(
        if args.reverse {
            TcpDirection::Down
        } else {
            TcpDirection::Up
        },
        rate_bps,
    );
    options.framing = args.method.framing.into();
    options.vlan = args.method.vlan;
    options.duration = args.duration.time.into();
    options.idle = args.method.idle.into();
    options.probe_interval = PROBE_INTERVAL;
    options.probe_bytes = PROBE_BYTES;
    options.window = window;
    options.mss = args.mss;
    options.congestion.clone_from(&args.congestion);
    options.sample_every = args.sample.into();
    options.count_interval = args.interval.map_or(COUNT_INTERVAL, Into::into);
    Ok(Rfc6349Config {
        target: args.client.target(&args.server.host)?,
        options,
    })
}

/// What a saved `tcp --rfc6349` run that failed part way holds.
const PARTIAL: &str = "the steps that finished (failed_step names the one that failed), the \
capacity run's finished steps when the bottleneck step failed (capacity_progress), and the \
failed step's TCP run as this end saw it (interrupted_run, as pathlab tcp keeps it)";

/// Runs `pathlab tcp HOST --rfc6349`.
pub fn run(args: &crate::cmd::tcp::Args) -> anyhow::Result<()> {
    let config = config(args)?;
    let json = args.client.output.json;
    let mut printer = Printer {
        out: std::io::stdout(),
        quiet: json,
        options: &config.options,
        host: &args.server.host,
        progress: None,
    };
    let report = method::run_config(&config, &mut |event| {
        printer.event(&event);
    })
    .map_err(|partial| {
        let error = match partial.error {
            error @ Rfc6349Error::Plan(_) => return usage(error),
            Rfc6349Error::Measure { step, source } => measure_error(source).context(step),
            other => anyhow::Error::new(other),
        };
        match partial.measured {
            Some(progress) => args.client.save_partial(
                error,
                PARTIAL,
                pathlab_results::RunResult::Rfc6349Partial(progress),
            ),
            None => error,
        }
    })?;
    drop(printer);
    args.client
        .save(|| pathlab_results::RunResult::Rfc6349(Box::new(report.clone())))?;
    if json {
        let mut printed = report;
        printed.baseline.report.series.clear();
        printed.baseline.report.series_sent_ns.clear();
        for phase in std::iter::once(&mut printed.single).chain(printed.multiple.as_mut()) {
            for stream in phase.run.up.iter_mut().chain(phase.run.down.iter_mut()) {
                stream.samples.truncate(1);
                stream.interval_bytes.clear();
            }
        }
        println!("{}", serde_json::to_string_pretty(&printed)?);
    } else {
        print_summary(&report)?;
    }
    Ok(())
}

/// Prints each step as the method reports it (nothing with `-J`).
struct Printer<'a> {
    out: std::io::Stdout,
    quiet: bool,
    options: &'a Rfc6349Options,
    host: &'a str,
    progress: Option<Progress>,
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

impl Printer<'_> {
    fn event(&mut self, event: &Event<'_>) {
        if let Event::Step(step) = event {
            self.progress = match *step {
                method::step::SINGLE | method::step::MULTIPLE => {
                    Progress::start("tcp", self.options.duration)
                }
                _ => None,
            };
        } else {
            self.progress = None;
        }
        if self.quiet {
            return;
        }
        // A closed stdout (a pipe whose reader left) must not stop the measurement.
        let _ = self.write(event);
    }

    fn write(&mut self, event: &Event<'_>) -> std::io::Result<()> {
        let out = &mut self.out.lock();
        match *event {
            Event::Step(step) => match step {
                method::step::MTU_UP => {
                    writeln!(
                        out,
                        "RFC 6349 TCP throughput test against {}, data {}",
                        self.host,
                        match self.options.direction {
                            TcpDirection::Down => "down (server to client, -R)",
                            _ => "up (client to server)",
                        }
                    )?;
                    writeln!(out, "step 1: path MTU (DF probes, RFC 4821)")?;
                }
                method::step::BASELINE => writeln!(
                    out,
                    "step 2: baseline RTT ({} probes of {} B every {} ms over {:.1} s idle)",
                    (self.options.idle.as_nanos() / self.options.probe_interval.as_nanos()),
                    self.options.probe_bytes,
                    self.options.probe_interval.as_millis(),
                    self.options.idle.as_secs_f64()
                )?,
                method::step::BOTTLENECK => writeln!(
                    out,
                    "step 3: bottleneck bandwidth{}",
                    if self.options.rate_bps.is_some() {
                        ""
                    } else {
                        " (measured: packet trains and a shaper stream, as pathlab capacity)"
                    }
                )?,
                method::step::SINGLE => writeln!(
                    out,
                    "step 5: TCP throughput, one connection, {:.1} s",
                    self.options.duration.as_secs_f64()
                )?,
                method::step::MULTIPLE => writeln!(
                    out,
                    "step 5: TCP throughput, the plan's connections, {:.1} s",
                    self.options.duration.as_secs_f64()
                )?,
                _ => {}
            },
            Event::Mtu(found) => print_mtu(out, found)?,
            Event::Baseline(baseline) => print_baseline(out, baseline)?,
            Event::Note(line) => writeln!(out, "  {line}")?,
            Event::Capacity(found) => {
                let c = &found.capacity;
                writeln!(
                    out,
                    "  capacity {} at the IP layer (95% CI {} to {}, {}-byte packets)",
                    format::rate(c.capacity_bps, Digits::fixed(2)),
                    format::rate(c.low_bps, Digits::fixed(2)),
                    format::rate(c.high_bps, Digits::fixed(2)),
                    c.packet_bytes
                )?;
                writeln!(
                    out,
                    "  bottleneck {} at the IP layer, from {}",
                    format::rate(c.bottleneck_bps(), Digits::fixed(2)),
                    c.bottleneck_source()
                )?;
            }
            Event::Plan {
                plan,
                kernel,
                congestion,
            } => print_plan(out, plan, kernel, congestion)?,
            Event::Phase(result) => print_phase(out, result, self.options)?,
        }
        out.flush()
    }
}

fn print_mtu(out: &mut impl std::io::Write, found: &PathMtu) -> std::io::Result<()> {
    writeln!(
        out,
        "  {:<4} {} bytes ({}, this end's route {} bytes; {} probes, {} missing)",
        found.direction.name(),
        found.mtu_bytes,
        if found.ipv6 { "IPv6" } else { "IPv4" },
        found.local_mtu_bytes,
        found.probes,
        found.lost
    )
}

fn print_baseline(out: &mut impl std::io::Write, baseline: &Baseline) -> std::io::Result<()> {
    let report = &baseline.report;
    writeln!(
        out,
        "  baseline RTT {} ms (the smallest of {} replies to {} probes; median {} ms, p99 {} ms; {})",
        format::in_millis(baseline.rtt_ns as f64 * 1e-9, Digits::fixed(3)),
        report.replies,
        report.sent,
        format::in_millis(report.rtt.p50_ns as f64 * 1e-9, Digits::fixed(3)),
        format::in_millis(report.rtt.p99_ns as f64 * 1e-9, Digits::fixed(3)),
        report.timed_by.describe()
    )
}

/// The plan's bottleneck (where its rate came from, which bytes it counts), then step 4's
/// heading, the ideal TCP rate through the bottleneck and the bandwidth-delay product.
fn print_plan_rates(
    out: &mut impl std::io::Write,
    plan: &Plan,
    kernel: &KernelSettings,
) -> std::io::Result<()> {
    let overhead = &plan.overhead;
    writeln!(
        out,
        "  bottleneck {} ({}, counting {})",
        format::rate(plan.bottleneck_bps, Digits::fixed(2)),
        match plan.rate_source {
            pathlab_probe::rfc6349::RateSource::Given => "given with --rate",
            pathlab_probe::rfc6349::RateSource::Measured => "measured",
        },
        match plan.framing {
            Framing::Ethernet => "physical Ethernet: IP + 38 B per packet",
            Framing::Frame => "frames: IP + the 14-B Ethernet header",
            Framing::Ip => "IP packets only",
        }
    )?;
    writeln!(out, "step 4: BDP, windows, connections")?;
    writeln!(
        out,
        "  ideal TCP rate {} = {} x {} / {} (MTU {}: IP {} B, TCP {} B{}, link {} B{})",
        format::rate(plan.ideal_rate_bps, Digits::fixed(2)),
        format::rate(plan.bottleneck_bps, Digits::fixed(2)),
        overhead.payload_bytes(plan.data_mtu_bytes),
        overhead.wire_bytes(plan.data_mtu_bytes),
        plan.data_mtu_bytes,
        overhead.ip_header_bytes,
        overhead.tcp_header_bytes,
        if kernel.timestamps {
            " with timestamps"
        } else {
            ""
        },
        overhead.link_bytes,
        if plan.vlan { " with a VLAN tag" } else { "" }
    )?;
    writeln!(
        out,
        "  BDP {} ({} B) = {} x {} ms",
        format::bytes_binary(plan.bdp_bytes, Digits::up_to(2)),
        plan.bdp_bytes,
        format::rate(plan.bottleneck_bps, Digits::fixed(2)),
        format::in_millis(plan.baseline_rtt_ns as f64 * 1e-9, Digits::fixed(3))
    )?;
    Ok(())
}

/// The window the plan needs, the largest one a connection gets (given, or what the hosts'
/// buffers allow) and so how many connections fill the pipe.
fn print_plan_windows(
    out: &mut impl std::io::Write,
    plan: &Plan,
    kernel: &KernelSettings,
) -> std::io::Result<()> {
    writeln!(
        out,
        "  window needed {} (the BDP and a quarter more, for what the receiving host holds back)",
        format::bytes_binary(plan.window_needed_bytes, Digits::up_to(2))
    )?;
    match plan.window_limit {
        WindowLimit::Given => writeln!(
            out,
            "  window per connection {} (-w: socket buffers at both ends)",
            format::bytes_binary(plan.largest_window_bytes, Digits::up_to(2))
        )?,
        WindowLimit::Host => writeln!(
            out,
            "  largest window per connection {}: half the smaller of tcp_rmem max {} and \
             tcp_wmem max {}, within rmem_max {} and wmem_max {}{} (the server is assumed \
             to allow as much)",
            format::bytes_binary(plan.largest_window_bytes, Digits::up_to(2)),
            kernel.tcp_rmem[2],
            kernel.tcp_wmem[2],
            kernel.rmem_max,
            kernel.wmem_max,
            if kernel.window_scaling {
                ""
            } else {
                ", and 65535 without window scaling"
            }
        )?,
    }
    if plan.connections == 1 {
        writeln!(
            out,
            "  one connection is enough: its largest window holds what is needed (with {} in \
             flight it would reach {} at the baseline RTT); it gets a window of {}",
            format::bytes_binary(plan.largest_window_bytes, Digits::up_to(2)),
            format::rate(plan.one_connection_bps(), Digits::fixed(2)),
            format::bytes_binary(plan.window_per_connection_bytes, Digits::up_to(2))
        )?;
    } else {
        writeln!(
            out,
            "  one connection's largest window holds less than that (at the baseline RTT it \
             reaches at most {}): {} connections of {} fill the pipe (RFC 6349 section 5.1)",
            format::rate(plan.one_connection_bps(), Digits::fixed(2)),
            plan.connections,
            format::bytes_binary(plan.window_per_connection_bytes, Digits::up_to(2))
        )?;
    }
    Ok(())
}

/// Step 4 of the method, as planned: the bottleneck, the ideal rate and the BDP, the
/// windows and connections, then the plan's MSS (given, or from the path MTU), congestion
/// control and the kernel's TCP options.
fn print_plan(
    out: &mut impl std::io::Write,
    plan: &Plan,
    kernel: &KernelSettings,
    congestion: &str,
) -> std::io::Result<()> {
    print_plan_rates(out, plan, kernel)?;
    print_plan_windows(out, plan, kernel)?;
    let overhead = &plan.overhead;
    writeln!(
        out,
        "  MSS {} B ({}); congestion control {congestion}; timestamps {}, SACK {}, window scaling {}",
        plan.mss_bytes,
        if plan.mss_given {
            "--mss".to_owned()
        } else {
            format!(
                "path MTU {} - {} B of IP and TCP headers",
                plan.data_mtu_bytes,
                overhead.ip_header_bytes + pathlab_probe::rfc6349::TCP_HEADER_BYTES
            )
        },
        on_off(kernel.timestamps),
        on_off(kernel.sack),
        on_off(kernel.window_scaling)
    )
}

fn print_phase(
    out: &mut impl std::io::Write,
    result: &PhaseResult,
    options: &Rfc6349Options,
) -> std::io::Result<()> {
    let steady = &result.steady;
    writeln!(
        out,
        "  {} connection{} with {} windows: steady state {:.2}-{:.2} s ({}), {} in {:.2} s = {}",
        result.connections,
        if result.connections == 1 { "" } else { "s" },
        format::bytes_binary(result.window_per_connection_bytes, Digits::up_to(2)),
        steady.from_ns as f64 * 1e-9,
        steady.to_ns as f64 * 1e-9,
        match steady.slow_start_end {
            SlowStartEnd::Ssthresh => format!(
                "slow start ended by a loss at {:.2} s",
                steady.slow_start_end_ns as f64 * 1e-9
            ),
            SlowStartEnd::WindowFull => format!(
                "the window filled at {:.2} s",
                steady.slow_start_end_ns as f64 * 1e-9
            ),
            SlowStartEnd::Floor => "no sign of slow start's end: from 10 RTTs on".to_owned(),
        },
        format::bytes_si(result.steady_bytes, Digits::fixed(1)),
        result.steady_s,
        format::rate(result.throughput_bps, Digits::fixed(2))
    )?;
    writeln!(
        out,
        "step 6: metrics ({} connection{})",
        result.connections,
        if result.connections == 1 { "" } else { "s" }
    )?;
    writeln!(
        out,
        "  Transfer Time Ratio     {:.3}  (actual {:.2} s / ideal {:.2} s at {}; MSS used {} B, TCP header {} B)",
        result.transfer_time_ratio,
        result.actual_transfer_s,
        result.ideal_transfer_s,
        format::rate(result.ideal_rate_bps, Digits::fixed(2)),
        result.mss_used_bytes,
        result.tcp_header_bytes
    )?;
    writeln!(
        out,
        "  TCP Efficiency          {}  ({} B transmitted, {} B in {} segments retransmitted)",
        format::fraction_as_percent(result.tcp_efficiency, Digits::fixed(2)),
        result.transmitted_bytes,
        result.retransmitted_bytes,
        result.retransmitted_segments
    )?;
    writeln!(
        out,
        "  Buffer Delay Percentage {}  (mean smoothed RTT {} ms over {} TCP_INFO samples, every {} ms, of the steady state)",
        format::percent_as_is(result.buffer_delay_percent, Digits::fixed(1)),
        format::in_millis(result.mean_rtt_ns * 1e-9, Digits::fixed(3)),
        result.rtt_samples,
        options.sample_every.as_millis()
    )
}

fn print_summary(report: &Rfc6349Report) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let answer = &report.answer().result;
    writeln!(
        out,
        "summary: {} of an ideal {} (TTR {:.3}), TCP efficiency {}, buffer delay {}, \
         {} connection{}, MTU {} up / {} down, MSS {} B, {} s per run, {}",
        format::rate(answer.throughput_bps, Digits::fixed(2)),
        format::rate(answer.ideal_rate_bps, Digits::fixed(2)),
        answer.transfer_time_ratio,
        format::fraction_as_percent(answer.tcp_efficiency, Digits::fixed(2)),
        format::percent_as_is(answer.buffer_delay_percent, Digits::fixed(1)),
        answer.connections,
        if answer.connections == 1 { "" } else { "s" },
        report.mtu_up.mtu_bytes,
        report.mtu_down.mtu_bytes,
        report.plan.mss_bytes,
        report.duration_ns as f64 * 1e-9,
        report.congestion_control
    )
}
