//! `--metrics ADDR [--metrics-token FILE]` of the long-running commands (`server`,
//! `bond server`, `bond client`): Prometheus text on `GET /metrics`, served from a thread
//! beside the command's own loop, which it never touches (it reads the counters or the
//! stats the command already keeps). And `--control ADDR` of `emulate` and `lab`, which
//! serves metrics with an API that changes things: [`ControlArgs`], [`Control`].

use std::net::SocketAddr;
use std::path::PathBuf;

use pathlab_emulator::address::{ControlAddress, ControlAddressConfig, ControlAddressError};
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
    HttpServer::bind_with_token_file(addr, token_file).map_err(|error| http_error(error, flag))
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

impl ControlArgs {
    /// The control address these flags ask for, if any; the token file is read and the
    /// trace directory opened when it is bound ([`Control::bind`],
    /// [`pathlab_emulator::address::ControlAddress::bind`]).
    pub fn config(&self) -> Option<ControlAddressConfig> {
        self.control.map(|addr| ControlAddressConfig {
            addr,
            token_file: self.control_token.clone(),
            trace_dir: self.trace_dir.clone(),
        })
    }
}

/// A control address that cannot be served, as the commands say it: `--control`'s and
/// `--trace-dir`'s problems are usage errors, a port in use or no random bytes are not.
pub fn control_address_error(error: ControlAddressError) -> anyhow::Error {
    match error {
        ControlAddressError::Http(error) => http_error(error, "--control"),
        ControlAddressError::TraceDir(error) => usage(anyhow::anyhow!("--trace-dir: {error}")),
        error @ ControlAddressError::NewToken(_) => anyhow::Error::new(error),
    }
}

/// Prints where a control address is (`what` names what it serves) and, if it was made at
/// start, the token, with the page's address that hands it over.
pub fn announce_control(address: &ControlAddress, what: &str) {
    announce_at(&address.server, address.made_token.as_deref(), what);
}

/// Prints `what`, then the token made at start, if any, with the page of `server` that
/// hands it over.
fn announce_at(server: &HttpServer, made_token: Option<&str>, what: &str) {
    let addr = server.local_addr();
    eprintln!("{what}");
    if let Some(token) = made_token {
        eprintln!(
            "  control token (every change needs it; --control-token FILE to choose one): \
             {token}\n  the page with it: http://{addr}/#token={token}"
        );
    }
}

/// A bound control address: its server, the token it requires, and the trace directory
/// (a [`ControlAddress`] with the fields `lab` takes apart).
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
    /// Binds `--control` if given, as [`ControlAddress::bind`] does: every change needs a
    /// token, the file's or one made here and printed by [`Control::announce`].
    pub fn bind(args: &ControlArgs) -> anyhow::Result<Option<Control>> {
        let Some(config) = args.config() else {
            return Ok(None);
        };
        let ControlAddress {
            server,
            made_token,
            traces,
        } = ControlAddress::bind(&config).map_err(control_address_error)?;
        Ok(Some(Control {
            server,
            made_token,
            traces,
        }))
    }

    /// Prints where the control address is (`what` names what it serves) and, if it was
    /// made at start, the token, with the page's address that hands it over.
    pub fn announce(&self, what: &str) {
        announce_at(&self.server, self.made_token.as_deref(), what);
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

    /// The bound server, for a command that serves it from its own threads.
    pub fn into_server(self) -> Option<HttpServer> {
        self.server
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
