//! `--metrics ADDR [--metrics-token FILE]` of the long-running commands (`server`,
//! `bond server`, `bond client`): Prometheus text on `GET /metrics`, served from a thread
//! beside the command's own loop, which it never touches (it reads the counters or the
//! stats the command already keeps).

use std::net::SocketAddr;
use std::path::PathBuf;

use pathlab_http::Request;
use pathlab_http::{HttpServer, HttpServerError};

use crate::usage;

/// The metrics address's options, shared by the commands that serve it.
#[derive(Debug, Clone, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus text metrics on `http://ADDR/metrics` (port 0: one the kernel
    /// picks, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Require `Authorization: Bearer TOKEN` with the token in FILE (its first line, at
    /// least 16 characters); needed unless ADDR is loopback.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub metrics_token: Option<PathBuf>,
}

/// Binds an HTTP address of `flag` (`--metrics`, `--control`) with the token in
/// `token_file`: a token file that will not do, or an address beyond loopback without
/// one, is a usage error; a failed bind (a port in use) is not.
pub fn bind_http(
    addr: SocketAddr,
    token_file: Option<&std::path::Path>,
    flag: &str,
) -> anyhow::Result<HttpServer> {
    let token = token_file
        .map(pathlab_http::read_token)
        .transpose()
        .map_err(usage)?;
    HttpServer::bind(addr, token).map_err(|error| match error {
        HttpServerError::NeedsToken(addr) => usage(anyhow::anyhow!(
            "{flag} {addr} is reachable from other machines: give a token with {flag}-token \
             FILE (or serve on 127.0.0.1 or [::1])"
        )),
        HttpServerError::Bind { .. } => anyhow::Error::new(error),
        other @ HttpServerError::Token { .. } => usage(other),
    })
}

/// A bound metrics address, or none.
#[derive(Debug)]
pub struct Metrics {
    server: Option<HttpServer>,
}

impl Metrics {
    /// Binds `--metrics` if given (a usage error for a token file that will not do, or a
    /// non-loopback address without one) and says where on stderr.
    pub fn bind(args: &MetricsArgs) -> anyhow::Result<Metrics> {
        let Some(addr) = args.metrics else {
            return Ok(Metrics { server: None });
        };
        let server = bind_http(addr, args.metrics_token.as_deref(), "--metrics")?;
        eprintln!("metrics: http://{}/metrics", server.local_addr());
        Ok(Metrics {
            server: Some(server),
        })
    }

    /// Runs `body` while serving `render` on the address (if one is bound); the serving
    /// thread stops when `body` returns.
    pub fn serve_while<R>(
        &self,
        render: &(dyn Fn() -> Result<String, String> + Sync),
        body: impl FnOnce() -> R,
    ) -> R {
        pathlab_http::metrics::serve_while(
            self.server.as_ref(),
            &|request: &Request| pathlab_http::metrics::route(request, render),
            body,
        )
    }
}

/// Context for a failed render: the command's own words.
pub fn render_error(error: impl std::fmt::Display) -> String {
    format!("no metrics: {error}")
}
