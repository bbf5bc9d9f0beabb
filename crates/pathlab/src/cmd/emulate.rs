//! `pathlab emulate`: a transparent bridge between two interfaces with a link model in each
//! direction, and `emulate set` / `emulate stats` to change and read it while it runs.

use std::fs::File;
use std::io::Write as _;

use anyhow::{bail, Context as _};
use pathlab_core::time::Duration;
use pathlab_core::LinkSpec;
use pathlab_io::control::{self, ControlError, ControlReply, ControlRequest, ControlServer};
use pathlab_io::emulator::{self, EmulatorConfig, EmulatorStats, OnInterfaceGone};
use pathlab_io::port::{PacketPort, PortError};

use crate::cmd::spec::parse_spec as load;
use crate::{format, usage};

/// Arguments of `pathlab emulate`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// The two interfaces to bridge; SPEC applies from the first to the second.
    #[arg(long, num_args = 2, value_names = ["IF_A", "IF_B"], required = true)]
    pub between: Vec<String>,
    /// The link spec from IF_A to IF_B, e.g. 'delay 20ms loss 1% rate 10mbit limit 100'.
    #[arg(value_name = "SPEC", num_args = 0..)]
    pub spec: Vec<String>,
    /// The spec from IF_B to IF_A (default: the same as SPEC).
    #[arg(long, value_name = "SPEC")]
    pub reverse: Option<String>,
    #[command(flatten)]
    pub common: Common,
    /// Write every packet's fate (arrival, departure, queue delay, drops) and a queue-length
    /// time series to FILE (JSON lines; see docs/emulate.md).
    #[arg(long, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
    /// How often the recording samples queue lengths.
    #[arg(long, value_name = "TIME", default_value = "10ms", value_parser = crate::cmd::parse_time)]
    pub sample_interval: Duration,
    /// Write what was forwarded and what was dropped (with the reason as a comment) to a
    /// pcapng FILE.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(short = 't', long, value_name = "TIME", value_parser = crate::cmd::parse_time)]
    pub time: Option<Duration>,
    /// Seed of the random choices (loss, jitter); the same seed replays the same choices
    /// for the same arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the equivalent `tc` commands for a kernel with netem (and what they cannot
    /// reproduce), and exit without touching anything.
    #[arg(long)]
    pub print_tc: bool,
    /// Print the final counters as JSON.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// When IF_A or IF_B disappears (a USB NIC unplugged, a veth deleted), wait for an
    /// interface of the same name to appear (checked every second, without using CPU
    /// meanwhile), open it as at start and forward again, instead of ending with exit 1.
    /// Both interfaces must exist at start.
    #[arg(long)]
    pub wait: bool,
}

/// Options every emulate action shares.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// The emulator's name, to run several at once and address each.
    #[arg(long, default_value = "default", global = true)]
    pub name: String,
}

/// What to do with a running emulator.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Replace the spec of a running emulator, as `tc qdisc replace` does; packets already
    /// inside keep the treatment they had.
    Set(SetArgs),
    /// Print a running emulator's counters: packets, drops by reason, queue, timing.
    Stats(StatsArgs),
}

/// Arguments of `pathlab emulate set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The new spec (both directions unless --reverse or --direction says otherwise).
    #[arg(value_name = "SPEC", required = true, num_args = 1..)]
    pub spec: Vec<String>,
    /// A different spec for the reverse direction.
    #[arg(long, value_name = "SPEC", conflicts_with = "direction")]
    pub reverse: Option<String>,
    /// Change only one direction: `forward` (IF_A to IF_B) or `reverse`.
    #[arg(long, value_parser = ["forward", "reverse", "both"], default_value = "both")]
    pub direction: String,
}

/// Arguments of `pathlab emulate stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Print JSON.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// Runs `pathlab emulate`.
pub fn run(args: &Args, command_line: Vec<String>) -> anyhow::Result<()> {
    pathlab_io::runtime::validate_name(&args.common.name).map_err(|e| usage(anyhow::anyhow!(e)))?;
    match &args.action {
        Some(Action::Set(set)) => return run_set(&args.common.name, set),
        Some(Action::Stats(stats)) => return run_stats(&args.common.name, stats.json),
        None => {}
    }
    let [if_a, if_b] = [&args.between[0], &args.between[1]];
    if if_a == if_b {
        return Err(usage(anyhow::anyhow!(
            "--between needs two different interfaces, got '{if_a}' twice"
        )));
    }
    let forward = load(&args.spec)?;
    let reverse = match &args.reverse {
        Some(text) => load(std::slice::from_ref(text))?,
        None => forward.clone(),
    };
    if args.print_tc {
        print_tc(&forward, if_b, &reverse, if_a);
        return Ok(());
    }
    pathlab_io::require_net_admin("pathlab emulate").map_err(usage)?;
    // Block Ctrl-C before any thread starts, so every thread leaves it to the signalfd.
    let signals = pathlab_io::termination_signals().context("setting up signal handling")?;
    // The socket first: a name clash is found before any interface is opened, and the
    // socket file goes away with `server` if opening an interface fails.
    let server = ControlServer::bind(&args.common.name).map_err(|e| match e {
        ControlError::NameTaken(_) => usage(e),
        other => anyhow::Error::new(other),
    })?;
    // Each port's ring holds the traffic that enters the direction it feeds.
    let open = |name: &str, spec: &LinkSpec| {
        PacketPort::open_with(name, pathlab_io::port::RingSize::for_link(spec)).map_err(port_error)
    };
    let ports = [open(if_a, &forward)?, open(if_b, &reverse)?];
    let create = |path: &std::path::Path, what: &str| {
        File::create(path)
            .with_context(|| format!("cannot create the {what} file '{}'", path.display()))
    };
    let config = EmulatorConfig {
        name: args.common.name.clone(),
        forward: forward.clone(),
        reverse: reverse.clone(),
        seed: args.seed,
        record: args
            .record
            .as_deref()
            .map(|p| create(p, "recording"))
            .transpose()?,
        pcap: args
            .pcap
            .as_deref()
            .map(|p| create(p, "capture"))
            .transpose()?,
        queue_sample_interval: args.sample_interval,
        command: command_line,
        on_interface_gone: if args.wait {
            OnInterfaceGone::Wait
        } else {
            OnInterfaceGone::Stop
        },
    };
    let handle = emulator::spawn(ports, config)?;
    eprintln!(
        "pathlab emulate '{name}': {if_a} <-> {if_b}\n  {if_a} -> {if_b}: {}\n  {if_b} -> {if_a}: {}\n\
         control: pathlab emulate stats --name {name}; pathlab emulate set --name {name} SPEC. Ctrl-C stops.",
        show(&forward),
        show(&reverse),
        name = args.common.name,
    );
    let deadline = args
        .time
        .map(|t| std::time::Instant::now() + std::time::Duration::from(t));
    server.serve(&handle, std::os::fd::AsFd::as_fd(&signals), || {
        deadline.is_some_and(|d| std::time::Instant::now() >= d)
    });
    let stats = handle.stop();
    drop(server);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print_stats(&stats);
    }
    if let Some(failure) = &stats.failure {
        anyhow::bail!("emulator '{}' stopped: {failure}", args.common.name);
    }
    Ok(())
}

fn show(spec: &LinkSpec) -> String {
    if spec.is_passthrough() {
        "(nothing: packets pass unchanged)".into()
    } else {
        spec.to_string()
    }
}

fn port_error(error: PortError) -> anyhow::Error {
    match error {
        PortError::Io { .. } => anyhow::Error::new(error),
        _ => usage(error),
    }
}

fn print_tc(forward: &LinkSpec, if_b: &str, reverse: &LinkSpec, if_a: &str) {
    for (spec, from, to) in [(forward, if_a, if_b), (reverse, if_b, if_a)] {
        let tc = pathlab_core::spec::tc::to_tc_commands(spec, to);
        println!("# {from} -> {to}: on the egress of {to}");
        for command in &tc.commands {
            println!("{command}");
        }
        for caveat in &tc.caveats {
            println!("# note: {caveat}");
        }
    }
}

fn run_set(name: &str, args: &SetArgs) -> anyhow::Result<()> {
    let spec = load(&args.spec)?;
    let reverse = args
        .reverse
        .as_ref()
        .map(|r| load(std::slice::from_ref(r)))
        .transpose()?;
    let text = spec.to_string();
    let (forward, reverse) = match (args.direction.as_str(), reverse) {
        ("forward", _) => (Some(text), None),
        ("reverse", _) => (None, Some(text)),
        (_, Some(reverse)) => (Some(text), Some(reverse.to_string())),
        (_, None) => (Some(text.clone()), Some(text)),
    };
    match control::request(name, &ControlRequest::Set { forward, reverse })
        .map_err(control_error)?
    {
        ControlReply::Ok => Ok(()),
        ControlReply::Error(error) => bail!("the emulator refused the spec: {error}"),
        ControlReply::Stats(_) => bail!("the emulator answered with stats to a set request"),
    }
}

fn run_stats(name: &str, json: bool) -> anyhow::Result<()> {
    match control::request(name, &ControlRequest::Stats).map_err(control_error)? {
        ControlReply::Stats(stats) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print_stats(&stats);
            }
            Ok(())
        }
        ControlReply::Error(error) => bail!("{error}"),
        ControlReply::Ok => bail!("the emulator answered 'ok' to a stats request"),
    }
}

fn control_error(error: ControlError) -> anyhow::Error {
    match error {
        ControlError::NotRunning { .. } => usage(error),
        other => anyhow::Error::new(other),
    }
}

/// Prints the counters of an emulator as a table.
pub fn print_stats(stats: &EmulatorStats) {
    let mut out = std::io::stdout().lock();
    let uptime = Duration::from_nanos(stats.uptime_ns);
    let _ = writeln!(
        out,
        "emulator '{}', up {:.3} s",
        stats.name,
        uptime.as_secs_f64()
    );
    for d in &stats.directions {
        let seconds = uptime.as_secs_f64().max(1e-9);
        let _ = writeln!(out, "{} -> {}: {}", d.from, d.to, show_text(&d.spec));
        let _ = writeln!(
            out,
            "  received   {} packets ({} frames){}",
            d.packets_received,
            d.frames_received,
            if d.malformed > 0 {
                format!(", {} malformed", d.malformed)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "  forwarded  {} packets, {} bytes, {} average",
            d.forwarded,
            d.forwarded_bytes,
            format::rate(d.forwarded_bytes as f64 * 8.0 / seconds)
        );
        let drops: Vec<String> = pathlab_core::DropReason::ALL
            .iter()
            .filter(|r| d.link.dropped(**r) > 0)
            .map(|r| format!("{} {}", d.link.dropped(*r), r.name()))
            .collect();
        let _ = writeln!(
            out,
            "  dropped    {}{}",
            d.link.dropped_total(),
            if drops.is_empty() {
                String::new()
            } else {
                format!(" ({})", drops.join(", "))
            }
        );
        if d.link.ce_marked + d.link.duplicated + d.link.corrupted + d.link.reordered > 0 {
            let _ = writeln!(
                out,
                "  altered    {} CE-marked, {} duplicated, {} corrupted, {} reordered",
                d.link.ce_marked, d.link.duplicated, d.link.corrupted, d.link.reordered
            );
        }
        let _ = writeln!(
            out,
            "  now        {} queued ({} bytes), {} inside the link",
            d.queue_packets, d.queue_bytes, d.in_flight
        );
        let late = &d.lateness;
        let _ = writeln!(
            out,
            "  timing     sent late by p50 {} us, p99 {} us, max {} us (over {} packets)",
            late.p50_ns / 1000,
            late.p99_ns / 1000,
            late.max_ns / 1000,
            late.packets
        );
        if d.send_errors + d.ring_full > 0 {
            let _ = writeln!(
                out,
                "  errors     {} sends failed, receive ring overflowed {} times",
                d.send_errors, d.ring_full
            );
        }
        if d.went_down > 0 {
            let _ = writeln!(
                out,
                "  down       {} went down {} time(s)",
                d.from, d.went_down
            );
        }
        if d.disappeared + d.reopened > 0 {
            let _ = writeln!(
                out,
                "  gone       {} disappeared {} time(s), reopened {} time(s)",
                d.from, d.disappeared, d.reopened
            );
        }
    }
}

fn show_text(spec: &str) -> &str {
    if spec.is_empty() {
        "(nothing)"
    } else {
        spec
    }
}
