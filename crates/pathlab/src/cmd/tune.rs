//! `pathlab tune`: the window a path needs, what this host's TCP settings allow, and what
//! to change (the CESNET checklist of seed 001). Read-only: it prints commands, it runs
//! none of them.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use pathlab_core::BitsPerSec;
use pathlab_probe_driver::tune::{self, TuneConfig, TuneConfigError, TuneError};
use pathlab_probe_driver::ServerTarget;

use crate::cmd::args::{ClientKey, JsonOutput};
use crate::cmd::client::measure_error;
use crate::usage;

/// Arguments of `pathlab tune`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A pathlab server to measure the RTT to (NAME or ADDRESS, optionally :PORT); not
    /// needed when both --rate and --rtt are given.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// The path's bottleneck rate (`1gbit`, `100mbit`, `10M`).
    #[arg(long, value_name = "RATE", value_parser = crate::cmd::parse_rate)]
    pub rate: Option<BitsPerSec>,
    /// The path's round-trip time (`170ms`; a bare number is seconds); measured from HOST
    /// when not given.
    #[arg(long, value_name = "TIME", value_parser = crate::cmd::parse_time)]
    pub rtt: Option<pathlab_core::Duration>,
    /// Read the settings under DIR instead of this host's: DIR/proc/sys/...,
    /// DIR/sys/class/net/IF/tx_queue_len and DIR/proc/self/auxv (the page size), to check
    /// another machine's settings from a copy.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    #[command(flatten)]
    pub key: ClientKey,
    #[command(flatten)]
    pub output: JsonOutput,
}

impl Args {
    /// What to look at, checked: a usage error says what is missing or wrong.
    fn config(&self) -> anyhow::Result<TuneConfig> {
        // The key is read only when there is something to measure.
        let measures = self.rate.is_none() || self.rtt.is_none();
        let server = match &self.host {
            Some(host) if measures => Some(ServerTarget::new(host, self.key.read()?)),
            _ => None,
        };
        let root = match &self.root {
            Some(root) => checked_root(root)?,
            None => PathBuf::from("/"),
        };
        TuneConfig::new(server, self.rate, self.rtt.map(Into::into), root).map_err(|missing| {
            usage(anyhow!(match missing {
                TuneConfigError::MissingRate =>
                    "missing --rate: give the path's bottleneck rate (e.g. --rate 1gbit)",
                TuneConfigError::MissingRtt =>
                    "missing --rtt: give the path's round-trip time (e.g. --rtt 170ms), or HOST, a pathlab server to measure it to",
                TuneConfigError::MissingBoth =>
                    "missing --rate and --rtt: give both (e.g. --rate 1gbit --rtt 170ms), or HOST and --rate to measure the RTT",
            }))
        })
    }
}

/// Runs `pathlab tune`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let report = tune::run(&config).map_err(|error| match error {
        TuneError::Measure(error) => measure_error(error),
        TuneError::Path(error) => usage(error),
        no_replies @ TuneError::NoReplies { .. } => anyhow::Error::new(no_replies),
    })?;
    let text = if args.output.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        pathlab_diagnose::tune::render_text(&report)
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        // A reader that stopped early (`| head`) wanted no more.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// `--root DIR` must be a directory holding a copy of `proc/sys` or `sys/class/net`.
fn checked_root(root: &Path) -> anyhow::Result<PathBuf> {
    if !root.is_dir() {
        return Err(usage(anyhow!(
            "--root '{}' is not a directory",
            root.display()
        )));
    }
    if !root.join("proc/sys").is_dir() && !root.join("sys/class/net").is_dir() {
        return Err(usage(anyhow!(
            "--root '{}' holds neither proc/sys nor sys/class/net: it is not a copy of a machine's settings",
            root.display()
        )));
    }
    Ok(root.to_owned())
}
