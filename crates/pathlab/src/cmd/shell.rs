//! `pathlab shell`: run a program in a network namespace behind an emulated link.

use anyhow::Context as _;
use pathlab_emulator::shell::{self, ShellConfig};

use crate::usage;

/// Arguments of `pathlab shell`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The link spec from the program outwards (uplink), e.g. 'delay 50ms rate 10mbit'.
    #[arg(value_name = "SPEC", required_unless_present = "twin")]
    pub spec: Option<String>,
    /// The spec towards the program (downlink; default: the same as SPEC).
    #[arg(long, value_name = "SPEC")]
    pub reverse: Option<String>,
    /// Run behind a measured path: a twin file's `up` spec outwards, its `down` spec
    /// towards the program; a trace it names is read beside it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["spec", "reverse"])]
    pub twin: Option<std::path::PathBuf>,
    /// The emulator's name, for `pathlab emulate set/stats --name` (default: shell-PID).
    #[arg(long)]
    pub name: Option<String>,
    /// Write every packet's fate and a queue-length time series to FILE.
    #[arg(long, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
    /// Write what was forwarded and dropped to a pcapng FILE.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Don't forward and masquerade the program's traffic beyond this namespace (by
    /// default IPv4 forwarding is on while shells run, and their traffic is NATed).
    #[arg(long)]
    pub no_nat: bool,
    /// Print the emulator's counters when the program exits.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub scheduling: crate::cmd::SchedulingArgs,
    /// The program and its arguments (default: $SHELL).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Runs `pathlab shell`; the exit code is the program's.
pub fn run(args: &Args) -> anyhow::Result<std::process::ExitCode> {
    let config = args.config()?;
    pathlab_os::require_net_admin("pathlab shell").map_err(usage)?;
    let signals = pathlab_os::termination_signals().context("setting up signal handling")?;
    let outcome = shell::run(&config, std::os::fd::AsFd::as_fd(&signals)).map_err(|error| {
        if error.is_usage() {
            usage(error)
        } else {
            anyhow::Error::new(error)
        }
    })?;
    if args.stats {
        crate::cmd::emulate::print_stats(&outcome.stats);
    }
    let code = outcome.status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + outcome.status.signal().unwrap_or(0)
    });
    Ok(std::process::ExitCode::from(code.clamp(0, 255) as u8))
}

impl Args {
    /// The shell these arguments ask for: the specs loaded, the name checked (default
    /// `shell-PID`), the program (default `$SHELL`). Every problem is a usage error.
    fn config(&self) -> anyhow::Result<ShellConfig> {
        let (uplink, downlink) = crate::cmd::spec::given_specs(
            self.twin.as_deref(),
            self.spec.as_slice(),
            self.reverse.as_ref(),
        )?;
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("shell-{}", std::process::id()));
        pathlab_os::runtime::validate_name(&name).map_err(|e| usage(anyhow::anyhow!(e)))?;
        let program = if self.command.is_empty() {
            vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into())]
        } else {
            self.command.clone()
        };
        Ok(ShellConfig {
            name,
            uplink,
            downlink,
            seed: self.seed,
            record: self.record.clone(),
            pcap: self.pcap.clone(),
            command: std::env::args().collect(),
            program,
            nat: !self.no_nat,
            scheduling: self.scheduling.request(),
        })
    }
}
