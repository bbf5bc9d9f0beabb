//! `pathlab server`: answers `owd`, `rtt`, `tcp` (and the commands built on them) clients,
//! within limits; `--metrics` serves its counters as Prometheus text.

use std::net::SocketAddr;

use anyhow::Context as _;
use pathlab_core::BitsPerSec;
use pathlab_probe::control::Limits;
use pathlab_probe_driver::{Server, ServerConfig, DEFAULT_PORT};

use crate::usage;

/// Arguments of `pathlab server`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (TCP control; each test gets its own UDP port on it).
    #[arg(long, value_name = "ADDR", default_value_t = SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 0], DEFAULT_PORT)))]
    pub listen: SocketAddr,
    /// Require every client to authenticate with the key in FILE (at least 16 bytes; only
    /// its owner may read the file).
    #[arg(long, value_name = "FILE")]
    pub psk: Option<std::path::PathBuf>,
    /// Highest rate a test may offer.
    #[arg(long, value_name = "RATE", default_value = "1gbit")]
    pub max_rate: String,
    /// Longest test.
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = crate::cmd::parse_time)]
    pub max_duration: pathlab_core::Duration,
    /// Most tests at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_tests: u32,
    /// Most memory one test may hold on the server (its records, reports and buffers,
    /// known from the request): a test that would hold more is refused saying so.
    #[arg(long, value_name = "SIZE", default_value = "64mb", value_parser = parse_memory)]
    pub max_test_memory: u64,
    /// Most connections at once from one source address (in their handshake or running a
    /// test); more are refused with a message saying so.
    #[arg(long, value_name = "N", default_value_t = ServerConfig::DEFAULT_MAX_CLIENTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_clients: u32,
    /// Most connections in their handshake at once, from everywhere; a new one beyond that
    /// displaces the oldest (a flood of idle connections cannot lock clients out).
    #[arg(long, value_name = "N", default_value_t = ServerConfig::DEFAULT_MAX_HANDSHAKES, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_handshakes: u32,
    #[command(flatten)]
    pub metrics: crate::cmd::metrics::MetricsArgs,
}

/// A memory size (`64mb`, `1gb`: powers of 1024), at least 1 MiB.
fn parse_memory(text: &str) -> Result<u64, String> {
    let bytes = pathlab_core::spec::parse_size(text).map_err(|e| e.to_string())?;
    if bytes < 1 << 20 {
        return Err(format!("{text} is less than 1mb"));
    }
    Ok(bytes)
}

impl Args {
    /// The server's address, limits and key, checked: a usage error names the option that
    /// will not do.
    fn config(&self) -> anyhow::Result<ServerConfig> {
        let max_rate = pathlab_core::spec::parse_rate(&self.max_rate).map_err(usage)?;
        let key = crate::cmd::args::read_key(self.psk.as_deref())?;
        Ok(ServerConfig {
            max_clients: self.max_clients,
            max_handshakes: self.max_handshakes,
            ..ServerConfig::new(
                self.listen,
                Limits {
                    max_rate_bps: max_rate.bits_per_sec(),
                    max_duration_ns: self.max_duration.as_nanos(),
                    max_tests: self.max_tests,
                    max_test_memory: self.max_test_memory,
                },
                key,
            )
        })
    }
}

/// Runs `pathlab server` until SIGTERM or Ctrl-C.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let limits = config.limits;
    let metrics = crate::cmd::metrics::Metrics::bind(&args.metrics)?;
    let signals = pathlab_os::termination_signals().context("setting up signal handling")?;
    let server =
        Server::bind(config).with_context(|| format!("cannot listen on {}", args.listen))?;
    eprintln!(
        "pathlab server listening on {} (max rate {}, max duration {}, max {} tests{})",
        server.local_addr()?,
        BitsPerSec(limits.max_rate_bps),
        pathlab_core::Duration::from_nanos(limits.max_duration_ns),
        limits.max_tests,
        if args.psk.is_some() {
            ", key required"
        } else {
            ""
        }
    );
    let counters = server.counters();
    metrics.serve_while(&|| Ok(pathlab_probe_driver::metrics(counters)), || {
        server.run(|| {
            pathlab_os::read_termination_signal(std::os::fd::AsFd::as_fd(&signals)).is_some()
        });
    });
    eprintln!("pathlab server: stopped: {}", server.counters().summary());
    Ok(())
}
