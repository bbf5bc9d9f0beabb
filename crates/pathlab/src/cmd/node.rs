//! `pathlab node CONFIG`: one node of a lab exported to an engine (KNE, containerlab), run
//! in its pod or container (docs/engines.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use pathlab_engines::export::node::NodeConfig;
use pathlab_engines::export::TOKEN_ENV;
use pathlab_engines::node::{self, NodeOptions};
use pathlab_http::TokenProblem;

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
    /// if set (how a KNE pod gets it). `pathlab lab collect --token` sends it.
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
    #[command(flatten)]
    pub scheduling: crate::cmd::SchedulingArgs,
}

/// Runs `pathlab node`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.config)
        .with_context(|| format!("cannot read '{}'", args.config.display()))
        .map_err(usage)?;
    if bytes.len() > pathlab_engines::export::node::MAX_TEXT_BYTES {
        return Err(usage(anyhow::anyhow!(
            "{}: over {} bytes",
            args.config.display(),
            pathlab_engines::export::node::MAX_TEXT_BYTES
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| usage(anyhow::anyhow!("{}: not UTF-8 text", args.config.display())))?;
    let config = NodeConfig::parse(&text)
        .map_err(|e| usage(anyhow::anyhow!("{}: {e}", args.config.display())))?;
    // Every refusal of the input comes before anything is touched, privileges included.
    let token = control_token(args.control_token.as_deref(), std::env::var_os(TOKEN_ENV))?;
    if token.is_none() && !pathlab_http::server::is_loopback(config.control.ip()) {
        return Err(usage(anyhow::anyhow!(
            "{}: control address {} is reachable from other machines: give its token with \
             --control-token FILE or in the environment as {TOKEN_ENV}",
            args.config.display(),
            config.control
        )));
    }
    pathlab_os::require_net_admin("pathlab node").map_err(usage)?;
    let server =
        pathlab_http::HttpServer::bind(config.control, token).map_err(anyhow::Error::new)?;
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
        config_sha256: pathlab_engines::node::wire::sha256_hex(config.to_toml().as_bytes()),
        config,
        out: args.out.clone(),
        wait: std::time::Duration::from_secs(args.wait),
        stop,
        server: Arc::new(server),
        trace_dir: traces.map(Arc::new),
        scheduling: args.scheduling.request(),
    });
    match result {
        Ok(_) | Err(node::NodeError::Stopped) => Ok(()),
        Err(error) => Err(anyhow::Error::new(error)),
    }
}

/// The control token: `--control-token FILE`'s if given, else the value of [`TOKEN_ENV`]
/// (`env`) if set, each checked by [`pathlab_http::token_from_text`]; `None` if neither.
fn control_token(file: Option<&Path>, env: Option<OsString>) -> anyhow::Result<Option<String>> {
    if let Some(file) = file {
        return pathlab_http::read_token(file).map(Some).map_err(usage);
    }
    let Some(value) = env else {
        return Ok(None);
    };
    value
        .into_string()
        .map_err(|_| TokenProblem::NotText)
        .and_then(|text| pathlab_http::token_from_text(&text))
        .map(Some)
        .map_err(|problem| usage(anyhow::anyhow!("{TOKEN_ENV}: {problem}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_file_else_the_environment_checked_alike() {
        let token = "0123456789abcdef0123";
        assert_eq!(control_token(None, None).unwrap(), None);
        assert_eq!(
            control_token(None, Some(format!(" {token}\n").into())).unwrap(),
            Some(token.to_owned())
        );
        for (value, problem) in [
            ("short", "the token is 5 characters; use at least 16"),
            ("", "the token is 0 characters"),
            (
                "0123456789 abcdef",
                "the token has spaces or characters outside printable ASCII",
            ),
        ] {
            let error = control_token(None, Some(value.into())).unwrap_err();
            assert!(error.is::<crate::UsageError>(), "{value:?}");
            assert!(
                error
                    .to_string()
                    .contains(&format!("{TOKEN_ENV}: {problem}")),
                "{value:?}: {error}"
            );
        }
        // A file named wins over the environment, and is read as a file.
        let error =
            control_token(Some(Path::new("/nonexistent/token")), Some(token.into())).unwrap_err();
        assert!(error.to_string().contains("/nonexistent/token"), "{error}");
    }
}
