//! `--metrics ADDR [--metrics-token FILE]` of the long-running commands (`server`,
//! `bond server`, `bond client`): Prometheus text on `GET /metrics`, served from a thread
//! beside the command's own loop, which it never touches (it reads the counters or the
//! stats the command already keeps). And `--control ADDR` of `emulate` and `lab`, which
//! serves metrics with an API that changes things: [`ControlArgs`], [`Control`].

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
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
    /// least 16 characters; only its owner may read the file); needed unless ADDR is
    /// loopback.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub metrics_token: Option<PathBuf>,
}

/// Binds an HTTP address of `flag` (`--metrics`) with the token in `token_file`: a token
/// file that will not do, or an address beyond loopback without one, is a usage error; a
/// failed bind (a port in use) is not.
pub fn bind_http(
    addr: SocketAddr,
    token_file: Option<&std::path::Path>,
    flag: &str,
) -> anyhow::Result<HttpServer> {
    let token = token_file
        .map(pathlab_http::read_token)
        .transpose()
        .map_err(usage)?;
    HttpServer::bind(addr, token).map_err(|error| http_error(error, flag))
}

/// An error of binding `flag`'s address, as the command says it.
fn http_error(error: HttpServerError, flag: &str) -> anyhow::Error {
    match error {
        HttpServerError::NeedsToken(addr) => usage(anyhow::anyhow!(
            "{flag} {addr} is reachable from other machines: give a token with {flag}-token \
             FILE (or serve on 127.0.0.1 or [::1])"
        )),
        HttpServerError::Bind { .. } => anyhow::Error::new(error),
        other @ (HttpServerError::Token { .. } | HttpServerError::TokenFile(_)) => usage(other),
    }
}

/// The control address's options, shared by `emulate` and `lab`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControlArgs {
    /// Serve the HTTP API (read and change the specs, stats), the live page and Prometheus
    /// /metrics on ADDR (`127.0.0.1:8080`, `[::]:8080`; port 0 picks a free one, printed at
    /// start). A change needs the token, from loopback too; beyond loopback every request
    /// but the page needs it, and a token file is required (--control-token).
    #[arg(long, value_name = "ADDR")]
    pub control: Option<SocketAddr>,
    /// The bearer token the control address requires, from the first line of FILE (at
    /// least 16 characters; only its owner may read it: `(umask 077; head -c 24
    /// /dev/urandom | base64 > FILE)`). Without it, a token is made at start and printed.
    #[arg(long, value_name = "FILE", requires = "control")]
    pub control_token: Option<PathBuf>,
    /// A spec sent to the control address may name trace files of DIR, by file name only
    /// (`trace lte.down`, no path). Without it, such specs name no trace. Specs on the
    /// command line read any path, as before.
    #[arg(long, value_name = "DIR", requires = "control")]
    pub trace_dir: Option<PathBuf>,
}

/// Opens the directory `flag` (`--trace-dir`, `--record-dir`) names, if given, at start:
/// a directory that is not there is a usage error, before anything is touched.
pub fn open_dir(
    path: Option<&std::path::Path>,
    flag: &str,
) -> anyhow::Result<Option<pathlab_os::files::Dir>> {
    path.map(pathlab_os::files::Dir::open)
        .transpose()
        .map_err(|e| usage(anyhow::anyhow!("{flag}: {e}")))
}

/// A bound control address: its server, the token it requires, and the trace directory.
#[derive(Debug)]
pub struct Control {
    /// The server, with the token; reads from loopback open, and the page public.
    pub server: HttpServer,
    /// The token, when it was made at start (to print); `None` when it came from a file.
    pub made_token: Option<String>,
    /// `--trace-dir`, opened.
    pub traces: Option<pathlab_os::files::Dir>,
}

impl Control {
    /// Binds `--control` if given. Every change needs a token: the file's, or a
    /// [`pathlab_http::new_token`] made here and printed by
    /// [`Control::announce`], as notebook servers do. Beyond loopback the token must come
    /// from a file (one printed on a remote box's terminal is easily lost or logged).
    pub fn bind(args: &ControlArgs) -> anyhow::Result<Option<Control>> {
        let Some(addr) = args.control else {
            return Ok(None);
        };
        let given = args
            .control_token
            .as_deref()
            .map(pathlab_http::read_token)
            .transpose()
            .map_err(usage)?;
        let traces = open_dir(args.trace_dir.as_deref(), "--trace-dir")?;
        let (token, made_token) = match given {
            Some(token) => (token, None),
            None if !pathlab_http::server::is_loopback(addr.ip()) => {
                return Err(http_error(HttpServerError::NeedsToken(addr), "--control"));
            }
            None => {
                let token = pathlab_http::new_token()
                    .context("making a control token from the kernel's random bytes")?;
                (token.clone(), Some(token))
            }
        };
        let server = HttpServer::bind(addr, Some(token))
            .map_err(|error| http_error(error, "--control"))?
            .public(&["/"])
            .reads_open_on_loopback();
        Ok(Some(Control {
            server,
            made_token,
            traces,
        }))
    }

    /// Prints where the control address is (`what` names what it serves) and, if it was
    /// made at start, the token, with the page's address that hands it over.
    pub fn announce(&self, what: &str) {
        let addr = self.server.local_addr();
        eprintln!("{what}");
        if let Some(token) = &self.made_token {
            eprintln!(
                "  control token (every change needs it; --control-token FILE to choose one): \
                 {token}\n  the page with it: http://{addr}/#token={token}"
            );
        }
    }
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
