//! `pathlab node CONFIG`: one node of a lab exported to an engine (KNE, containerlab), run
//! in its pod or container (docs/engines.md).

use std::path::PathBuf;

use pathlab_engines::export::{TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_ENV};
use pathlab_engines::node::setup::{self, NodeRunConfig};

use crate::usage;

/// Arguments of `pathlab node`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's config, as `pathlab lab export` wrote it.
    #[arg(value_name = "CONFIG")]
    pub config: PathBuf,
    /// The bearer token of the control address, from the first line of FILE (at least 16
    /// characters, readable by its owner only); needed unless the config's control
    /// address is loopback. Without it, the token is the value of PATHLAB_CONTROL_TOKEN
    /// if set (how a KNE pod gets it). `pathlab lab collect --export DIR` sends it.
    #[arg(long, value_name = "FILE")]
    pub control_token: Option<PathBuf>,
    /// The node's certificate (PEM, signed by the lab's CA: `lab export` writes
    /// DIR/NODE.crt): the control address speaks TLS only, proving the node's name. Needed
    /// unless the control address is loopback; without it, the certificate is the value of
    /// PATHLAB_TLS_CERT if set (how a KNE pod gets it).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The node's private key (PEM, readable by its owner only: DIR/NODE.key); without it,
    /// the value of PATHLAB_TLS_KEY if set.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Where the node keeps its recordings, outputs and result [default:
    /// /run/pathlab/node/NODE]. Made if missing; an existing one must be this user's and
    /// writable by no one else, and every file the node writes there is one it made.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// How long to wait for the node's interfaces, and for each link's far end to answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub wait: u64,
    /// A spec sent to the control address may name trace files of DIR, by file name.
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<PathBuf>,
    #[command(flatten)]
    pub scheduling: crate::cmd::SchedulingArgs,
    /// The emulators' metrics alone, in plain HTTP for a scraper without the lab's CA (the
    /// control address serves them too, in TLS).
    #[command(flatten)]
    pub metrics: crate::cmd::metrics::MetricsArgs,
}

impl Args {
    /// The node's run: its config read and checked, its token; every refusal of the input
    /// is a usage error, and comes before anything is touched, privileges included.
    fn config(&self) -> anyhow::Result<NodeRunConfig> {
        let node = setup::load_config(&self.config).map_err(usage)?;
        let token =
            setup::control_token(self.control_token.as_deref(), std::env::var_os(TOKEN_ENV))
                .map_err(usage)?;
        let tls = setup::tls_identity(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            std::env::var_os(TLS_CERT_ENV),
            std::env::var_os(TLS_KEY_ENV),
        )
        .map_err(usage)?;
        if !pathlab_http::server::is_loopback(node.control.ip()) {
            if token.is_none() {
                return Err(usage(anyhow::anyhow!(
                    "{}: control address {} is reachable from other machines: give its token \
                     with --control-token FILE or in the environment as {TOKEN_ENV}",
                    self.config.display(),
                    node.control
                )));
            }
            if tls.is_none() {
                return Err(usage(anyhow::anyhow!(
                    "{}: control address {} is reachable from other machines: give the node's \
                     certificate and key (`lab export` writes NODE.crt and NODE.key) with \
                     --tls-cert FILE --tls-key FILE or in the environment as {TLS_CERT_ENV} and \
                     {TLS_KEY_ENV}",
                    self.config.display(),
                    node.control
                )));
            }
        }
        let out = (self.out.clone()).unwrap_or_else(|| setup::default_out(&node.node));
        Ok(NodeRunConfig {
            node,
            token,
            tls,
            out,
            wait: std::time::Duration::from_secs(self.wait),
            scheduling: self.scheduling.request(),
        })
    }
}

/// Runs `pathlab node`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    pathlab_os::require_net_admin("pathlab node").map_err(usage)?;
    setup::check_capabilities().map_err(usage)?;
    let out = config.open_out().map_err(usage)?;
    let server = config.bind().map_err(anyhow::Error::new)?;
    let metrics = crate::cmd::metrics::Metrics::bind(&args.metrics)?;
    let traces = crate::cmd::metrics::open_dir(args.trace_dir.as_deref(), "--trace-dir")?;
    let stop = crate::cmd::stop_on_signals()?;
    let node = &config.node;
    eprintln!(
        "pathlab node {} of lab {}: control on {}://{} ({} interfaces, {} workloads)",
        node.node,
        node.lab,
        if server.is_tls() { "https" } else { "http" },
        server.local_addr(),
        node.interfaces.len(),
        node.workloads.len()
    );
    // Before the swaps: the guardian puts the pod's interfaces back if this process is
    // killed mid-run (the pod's namespace may outlive it: a KNE pod's does).
    let guardian = if pathlab_os::interpose::test_without_guardian() {
        None
    } else {
        let name = format!("node-{}", std::process::id());
        Some(
            pathlab_emulator::guardian::start(&name)
                .map_err(anyhow::Error::new)
                .map_err(|e| e.context("starting the guardian of the interface swaps"))?,
        )
    };
    setup::serve(&config, server, out, traces, metrics.into_server(), stop)?;
    if let Some(guardian) = guardian {
        guardian.stand_down().map_err(|e| {
            anyhow::Error::new(e).context("telling the guardian the interfaces are back")
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    /// `pathlab node`'s arguments alone, to build its config as the command does.
    #[derive(clap::Parser)]
    struct Node {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn a_config_file_that_cannot_be_read_is_a_usage_error() {
        let Node { args } = Node::parse_from(["node", "/nonexistent/node.toml"]);
        let error = args.config().unwrap_err();
        assert!(error.is::<crate::UsageError>(), "{error}");
        assert_eq!(
            format!("{error:#}"),
            "cannot read '/nonexistent/node.toml': No such file or directory (os error 2)"
        );
    }
}
