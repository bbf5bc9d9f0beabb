//! pathlab: the command line.
//!
//! Parse what the user typed, build a validated configuration, run, print. Exit codes: 0
//! success, 1 the run failed, 2 the input was wrong.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod chart;
mod cmd;

/// Emulate, measure and experiment on network paths, in user space.
#[derive(Debug, Parser)]
#[command(name = "pathlab", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a link spec and print it in canonical form (or as JSON with -J).
    Spec(cmd::spec::Args),
    /// Run a path in virtual time under synthetic loads and report what it did to them.
    Sim(cmd::sim::Args),
    /// Bridge two interfaces through an emulated link, each direction its own spec.
    Emulate(Box<cmd::emulate::Args>),
    /// The guardian `emulate --iface` starts for itself: puts the interface back if the
    /// emulator is killed.
    #[command(hide = true, name = "emulate-guard")]
    EmulateGuard(cmd::emulate::GuardArgs),
    /// Run a program in a network namespace behind an emulated link.
    Shell(cmd::shell::Args),
    /// Experiments on namespaced topologies, and cleanup after killed runs.
    Lab(cmd::lab::Args),
    /// One node of a lab exported to an engine (KNE, containerlab), in its pod or container.
    Node(cmd::node::Args),
    /// Answer measurement clients (owd, rtt, tcp), within rate, duration and concurrency limits.
    Server(cmd::server::Args),
    /// One-way delay probing: loss, reordering, jitter, delay deviation, queue verdict.
    Owd(cmd::owd::Args),
    /// Isochronous round trips: RTT percentiles, loss each way, one-way split.
    Rtt(cmd::rtt::Args),
    /// Bulk TCP like iperf3: parallel streams, reverse, bidirectional, TCP_INFO samples.
    Tcp(cmd::tcp::Args),
    /// Bottleneck capacity (packet pairs and trains) and available bandwidth (self-loading streams).
    Capacity(cmd::capacity::Args),
    /// The window a path needs (rate x RTT), this host's TCP settings against it, what to change.
    Tune(cmd::tune::Args),
    /// Latency under load: idle, download, upload and both; added latency, grade, RPM, verdict.
    Bloat(cmd::bloat::Args),
    /// Bond several lines into one tunnel, each line paced by its one-way delay.
    Bond(Box<cmd::bond::Args>),
    /// Re-plot saved lab runs: CSV files, PNG and SVG figures, one HTML page.
    Report(cmd::report::Args),
    /// Measure a real path and write its twin: a file the emulator runs (emulate --twin).
    Twin(cmd::twin::Args),
    /// What limits the live TCP transfers of any program: receiver's window, send buffer, congestion or the application.
    Inspect(cmd::inspect::Args),
    /// What each TCP connection in a pcap/pcapng capture did and what limited it.
    Analyze(cmd::analyze::Args),
}

/// An error caused by the user's input (exit code 2), as opposed to a failed run (1).
#[derive(Debug)]
pub struct UsageError(pub anyhow::Error);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for UsageError {}

/// Wraps any error as a usage error.
pub fn usage(error: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(UsageError(error.into()))
}

/// A reader that closed standard output early (`pathlab spec --list-presets | head -3`)
/// ends the command as it ends `cat`: quietly, with the status of a death by SIGPIPE (141),
/// instead of `println!`'s panic "failed printing to stdout: Broken pipe". Rust ignores
/// SIGPIPE so that sockets report EPIPE; that stays so.
fn quiet_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_when_stdout_closes();
    let command_line: Vec<String> = std::env::args().collect();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Spec(args) => cmd::spec::run(&args),
        Command::Sim(args) => cmd::sim::run(&args),
        Command::Emulate(args) => cmd::emulate::run(&args, command_line),
        Command::EmulateGuard(args) => cmd::emulate::run_guard(&args),
        Command::Shell(args) => match cmd::shell::run(&args) {
            Ok(code) => return code,
            Err(error) => Err(error),
        },
        Command::Lab(args) => cmd::lab::run(&args),
        Command::Node(args) => cmd::node::run(&args),
        Command::Server(args) => cmd::server::run(&args),
        Command::Owd(args) => cmd::owd::run(&args),
        Command::Rtt(args) => cmd::rtt::run(&args),
        Command::Tcp(args) => cmd::tcp::run(&args),
        Command::Tune(args) => cmd::tune::run(&args),
        Command::Inspect(args) => cmd::inspect::run(&args),
        Command::Bloat(args) => cmd::bloat::run(&args),
        Command::Report(args) => cmd::report::run(&args),
        Command::Analyze(args) => cmd::analyze::run(&args, command_line),
        Command::Bond(args) => cmd::bond::run(&args),
        Command::Capacity(args) => cmd::capacity::run(&args),
        Command::Twin(args) => cmd::twin::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("pathlab: {error:#}");
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// clap checks a command's definition only when it is parsed in a debug build: a
    /// conflict (two flattened structs that both derive an argument group named `Args`)
    /// stopped `pathlab tcp` in every debug build. This checks every subcommand at once.
    #[test]
    fn every_subcommand_is_defined_consistently() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
