//! `--metrics ADDR [--metrics-token FILE]` of the long-running commands (`server`,
//! `bond server`, `bond client`): Prometheus text on `GET /metrics`, served from a thread
//! beside the command's own loop, which it never touches (it reads the counters or the
//! stats the command already keeps).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use pathlab_io::http::{HttpServer, HttpServerError};
use pathlab_probe::http::{Request, Response};
use pathlab_results::prometheus::CONTENT_TYPE;

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

/// The answer to `request`: the exposition `render` gives for `GET /metrics` (503 with
/// its message when it has none), 405 for another method there, 404 elsewhere.
pub fn route(request: &Request, render: &dyn Fn() -> Result<String, String>) -> Response {
    if request.path != "/metrics" {
        return Response::error(
            404,
            &format!("no {}: metrics are at /metrics", request.path),
        );
    }
    if request.method != "GET" {
        return Response::error(405, "/metrics takes GET").with_header("Allow", "GET");
    }
    match render() {
        Ok(text) => Response::new(200, CONTENT_TYPE, text),
        Err(why) => Response::error(503, &why),
    }
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
        .map(pathlab_io::http::read_token)
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
        let Some(server) = &self.server else {
            return body();
        };
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| server.serve(&stop, &|request: &Request| route(request, render)));
            // The flag is set even if `body` panics, so the scope's join does not hang.
            let _stop = StopOnDrop(&stop);
            body()
        })
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Context for a failed render: the command's own words.
pub fn render_error(error: impl std::fmt::Display) -> String {
    format!("no metrics: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
            peer: None,
        }
    }

    #[test]
    fn metrics_are_at_get_metrics_only() {
        let render = || Ok("# HELP x_total x\n# TYPE x_total counter\nx_total 1\n".to_owned());
        let ok = route(&request("GET", "/metrics"), &render);
        assert_eq!(ok.status, 200);
        assert!(ok
            .headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("content-type") && v == CONTENT_TYPE));
        assert_eq!(route(&request("POST", "/metrics"), &render).status, 405);
        let missing = route(&request("GET", "/"), &render);
        assert_eq!(missing.status, 404);
        assert!(String::from_utf8_lossy(&missing.body).contains("/metrics"));
        let failing = || Err("the tunnel is not up yet".to_owned());
        assert_eq!(route(&request("GET", "/metrics"), &failing).status, 503);
    }
}
