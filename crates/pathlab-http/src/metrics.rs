//! The one `/metrics` route: Prometheus text from whatever the command already counts, used
//! by `pathlab server`, `bond`, `emulate --control` and `lab --control` alike.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::message::{Request, Response};
use crate::prometheus::CONTENT_TYPE;
use crate::server::HttpServer;

/// Where the exposition is served.
pub const PATH: &str = "/metrics";

/// The answer at [`PATH`]: the exposition `render` gives for `GET` (503 with its message
/// when it has none), 405 for another method; `None` for any other path, which is the
/// caller's to answer.
pub fn answer(request: &Request, render: &dyn Fn() -> Result<String, String>) -> Option<Response> {
    if request.path != PATH {
        return None;
    }
    if request.method != "GET" {
        return Some(Response::error(405, "/metrics takes GET").with_header("Allow", "GET"));
    }
    Some(match render() {
        Ok(text) => Response::new(200, CONTENT_TYPE, text),
        Err(why) => Response::error(503, &why),
    })
}

/// The answer of an address that serves metrics alone: [`answer`], and 404 saying where
/// the metrics are for any other path.
pub fn route(request: &Request, render: &dyn Fn() -> Result<String, String>) -> Response {
    answer(request, render).unwrap_or_else(|| {
        Response::error(404, &format!("no {}: metrics are at {PATH}", request.path))
    })
}

/// Runs `body` while `server` (if any) answers requests with `handler` on a thread of its
/// own; the thread stops when `body` returns or panics.
pub fn serve_while<R>(
    server: Option<&HttpServer>,
    handler: &(dyn Fn(&Request) -> Response + Sync),
    body: impl FnOnce() -> R,
) -> R {
    let Some(server) = server else {
        return body();
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| server.serve(&stop, handler));
        // The flag is set even if `body` panics, so the scope's join does not hang.
        let _stop = StopOnDrop(&stop);
        body()
    })
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
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
        assert!(answer(&request("GET", "/"), &render).is_none());
        let failing = || Err("the tunnel is not up yet".to_owned());
        assert_eq!(route(&request("GET", "/metrics"), &failing).status, 503);
    }
}
