//! `pathlab node CONFIG`: one node of a lab exported to an engine (KNE, containerlab), run
//! in its pod or container (docs/engines.md).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use pathlab_lab::export::node::NodeConfig;
use pathlab_lab::node::{self, NodeOptions};

use crate::usage;

/// Arguments of `pathlab node`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's config, as `pathlab lab export` wrote it.
    #[arg(value_name = "CONFIG")]
    pub config: PathBuf,
    /// The bearer token of the control address, from the first line of FILE (at least 16
    /// characters, readable by its owner only); needed unless the config's control
    /// address is loopback. `pathlab lab collect --token` sends it.
    #[arg(long, value_name = "FILE")]
    pub control_token: Option<PathBuf>,
    /// Where the node keeps its recordings, outputs and result.
    #[arg(long, value_name = "DIR", default_value = "/tmp/pathlab-node")]
    pub out: PathBuf,
    /// How long to wait for the node's interfaces, and for each link's far end to answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub wait: u64,
    /// A spec sent to the control address may name trace files of DIR, by file name.
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<PathBuf>,
}

/// Runs `pathlab node`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.config)
        .with_context(|| format!("cannot read '{}'", args.config.display()))
        .map_err(usage)?;
    if bytes.len() > pathlab_lab::export::node::MAX_TEXT_BYTES {
        return Err(usage(anyhow::anyhow!(
            "{}: over {} bytes",
            args.config.display(),
            pathlab_lab::export::node::MAX_TEXT_BYTES
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| usage(anyhow::anyhow!("{}: not UTF-8 text", args.config.display())))?;
    let config = NodeConfig::parse(&text)
        .map_err(|e| usage(anyhow::anyhow!("{}: {e}", args.config.display())))?;
    pathlab_os::require_net_admin("pathlab node").map_err(usage)?;
    let server =
        crate::cmd::metrics::bind_http(config.control, args.control_token.as_deref(), "--control")?;
    let traces = crate::cmd::metrics::open_dir(args.trace_dir.as_deref(), "--trace-dir")?;
    let stop = crate::cmd::stop_on_signals()?;
    eprintln!(
        "pathlab node {} of lab {}: control on http://{} ({} interfaces, {} workloads)",
        config.node,
        config.lab,
        server.local_addr(),
        config.interfaces.len(),
        config.workloads.len()
    );
    let result = node::run(&NodeOptions {
        // Of the config as read, written back: comments and layout do not count.
        config_sha256: pathlab_lab::node::wire::sha256_hex(config.to_toml().as_bytes()),
        config,
        out: args.out.clone(),
        wait: std::time::Duration::from_secs(args.wait),
        stop,
        server: Arc::new(server),
        trace_dir: traces.map(Arc::new),
    });
    match result {
        Ok(_) | Err(node::NodeError::Stopped) => Ok(()),
        Err(error) => Err(anyhow::Error::new(error)),
    }
}
