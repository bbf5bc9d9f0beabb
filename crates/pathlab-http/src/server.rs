//! The HTTP edge of the control and metrics addresses: a listener whose connections each
//! get one request and one response (`pathlab_http` reads and writes them), a
//! bearer token checked on every request, and the client that `emulate set --remote` uses.
//!
//! Served from a thread of its own, with a thread per connection (at most
//! [`MAX_CONNECTIONS`] at once: the rest get 503) and a 5 s limit to send a request, so a
//! slow or hostile peer holds one thread for 5 s at most and never the forwarding.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::message::{self as http, ClientResponse, HttpError, Parsed, Request, Response};

use pathlab_os::sys;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a peer has to send its whole request.
const REQUEST_TIME: Duration = Duration::from_secs(5);
/// The shortest token taken: 16 characters (a token from `head -c 24 /dev/urandom |
/// base64` has 32).
pub const MIN_TOKEN: usize = 16;

/// Why an address cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum HttpServerError {
    /// Not loopback, and no token.
    #[error(
        "{0} is reachable from other machines: give a token with --control-token FILE (or \
         serve on 127.0.0.1 or [::1])"
    )]
    NeedsToken(SocketAddr),
    /// The token file is unusable.
    #[error("token file {path}: {problem}")]
    Token {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// Binding failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: io::Error,
    },
}

/// Reads a bearer token from `path`: its first line, trimmed, at least [`MIN_TOKEN`]
/// printable characters.
pub fn read_token(path: &Path) -> Result<String, HttpServerError> {
    let fail = |problem: String| HttpServerError::Token {
        path: path.display().to_string(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < MIN_TOKEN {
        return Err(fail(format!(
            "the token is {} characters; use at least {MIN_TOKEN} (e.g. head -c 24 \
             /dev/urandom | base64 > FILE)",
            token.len()
        )));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(fail(
            "the token has spaces or characters outside printable ASCII".into(),
        ));
    }
    Ok(token)
}

/// A listening control or metrics address.
#[derive(Debug)]
pub struct HttpServer {
    listener: TcpListener,
    addr: SocketAddr,
    token: Option<String>,
    /// Paths served without the token (a page that holds no data and asks for it).
    public: Vec<&'static str>,
}

impl HttpServer {
    /// Listens on `addr`; a token is required unless `addr` is loopback.
    pub fn bind(addr: SocketAddr, token: Option<String>) -> Result<HttpServer, HttpServerError> {
        if token.is_none() && !is_loopback(addr.ip()) {
            return Err(HttpServerError::NeedsToken(addr));
        }
        let listener =
            TcpListener::bind(addr).map_err(|source| HttpServerError::Bind { addr, source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| HttpServerError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| HttpServerError::Bind { addr, source })?;
        Ok(HttpServer {
            listener,
            addr,
            token,
            public: Vec::new(),
        })
    }

    /// Serves `paths` (GET only) without the token.
    pub fn public(mut self, paths: &[&'static str]) -> HttpServer {
        self.public.extend_from_slice(paths);
        self
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves requests with `handler` until `stop` is set (looked at every 100 ms). Each
    /// request is checked for the token first: without it, 401.
    pub fn serve(&self, stop: &AtomicBool, handler: &(dyn Fn(&Request) -> Response + Sync)) {
        let active = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            while !stop.load(Ordering::Acquire) {
                let mut ready = [false];
                let _ = sys::poll_readable(
                    &[self.listener.as_fd()],
                    Some(Duration::from_millis(100)),
                    &mut ready,
                );
                while let Ok((stream, peer)) = self.listener.accept() {
                    if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
                        let _ = stream.set_nonblocking(false);
                        let _ = (&stream).write_all(
                            &Response::error(503, "too many connections at once").to_bytes(),
                        );
                        continue;
                    }
                    active.fetch_add(1, Ordering::AcqRel);
                    let active = &active;
                    scope.spawn(move || {
                        let _ = self.answer(stream, peer, handler);
                        active.fetch_sub(1, Ordering::AcqRel);
                    });
                }
            }
        });
    }

    fn answer(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
        handler: &(dyn Fn(&Request) -> Response + Sync),
    ) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        let deadline = std::time::Instant::now() + REQUEST_TIME;
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 8192];
        let mut continued = false;
        let response = loop {
            match http::parse_request(&buf) {
                Ok(Parsed::Complete(mut request, _)) => {
                    request.peer = Some(peer.to_string());
                    break self.authorized(&request, handler);
                }
                Ok(Parsed::Incomplete { head }) => {
                    if let Some(head) = head {
                        if !continued && head.expects_continue() {
                            continued = true;
                            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
                        }
                    }
                }
                Err(error) => break Response::error(error.status(), &error.to_string()),
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break Response::error(408, "the request took over 5 s to arrive");
            }
            stream.set_read_timeout(Some(left))?;
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break Response::error(408, "the request took over 5 s to arrive"),
            }
        };
        stream.set_write_timeout(Some(REQUEST_TIME))?;
        stream.write_all(&response.to_bytes())?;
        stream.shutdown(std::net::Shutdown::Write)
    }

    fn authorized(
        &self,
        request: &Request,
        handler: &(dyn Fn(&Request) -> Response + Sync),
    ) -> Response {
        if let Some(refused) = self.refuse_cross_site(request) {
            return refused;
        }
        let public = request.method == "GET" && self.public.contains(&request.path.as_str());
        match &self.token {
            Some(token)
                if !public
                    && !request.bearer().is_some_and(|given| {
                        http::tokens_equal(given.as_bytes(), token.as_bytes())
                    }) =>
            {
                Response::error(
                    401,
                    "this address needs 'Authorization: Bearer TOKEN', the token of the file \
                     it was started with",
                )
                .with_header("WWW-Authenticate", "Bearer realm=\"pathlab\"")
            }
            _ => handler(request),
        }
    }
}

impl HttpServer {
    /// What keeps a web page the user visits from driving this address through their
    /// browser. A body must come as JSON: a browser sends a form or plain text to any
    /// site without asking first, but asks (a CORS preflight, which is refused here)
    /// before sending JSON elsewhere. And without a token, only loopback names are taken
    /// in `Host`: a site whose name resolves to 127.0.0.1 (DNS rebinding) would otherwise
    /// be same-origin with this address and read it.
    fn refuse_cross_site(&self, request: &Request) -> Option<Response> {
        if !request.body.is_empty() {
            let json = request.header("content-type").is_some_and(|value| {
                value
                    .split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
            });
            if !json {
                return Some(Response::error(
                    415,
                    "send the body as JSON, with 'Content-Type: application/json'",
                ));
            }
        }
        if self.token.is_none() {
            if let Some(host) = request.header("host") {
                if !host_is_loopback(host) {
                    return Some(Response::error(
                        403,
                        &format!(
                            "'Host: {host}' is not this loopback address; without a token only \
                             127.0.0.1, [::1] and localhost are served"
                        ),
                    ));
                }
            }
        }
        None
    }
}

/// Whether `Host` names a loopback address (`127.0.0.1:8080`, `[::1]:8080`,
/// `localhost`), on any port: an SSH tunnel (`ssh -L 9000:127.0.0.1:8080`) brings the
/// page to another port, and a rebinding site's name is never a loopback one.
fn host_is_loopback(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, p)) if !name.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(is_loopback)
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Why a request to a control address failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody answers.
    #[error("cannot reach {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// The error.
        source: io::Error,
    },
    /// The exchange failed midway.
    #[error("talking to {addr}: {source}")]
    Io {
        /// The address.
        addr: String,
        /// The error.
        source: io::Error,
    },
    /// The answer is not HTTP.
    #[error("{addr} answered something that is not HTTP: {source}")]
    NotHttp {
        /// The address.
        addr: String,
        /// What is wrong.
        source: HttpError,
    },
}

/// Sends one request to `addr` (`HOST:PORT`) and returns the response: 5 s to connect,
/// 10 s for the answer.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<ClientResponse, ClientError> {
    use std::net::ToSocketAddrs as _;
    let connect = |source| ClientError::Connect {
        addr: addr.to_owned(),
        source,
    };
    let io_error = |source| ClientError::Io {
        addr: addr.to_owned(),
        source,
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
    let mut stream = None;
    for socket_addr in addr.to_socket_addrs().map_err(connect)? {
        match TcpStream::connect_timeout(&socket_addr, Duration::from_secs(5)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut stream = stream.ok_or_else(|| connect(last))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io_error)?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        let _ = write!(head, "Authorization: Bearer {token}\r\n");
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() {
        let _ = write!(
            head,
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).map_err(io_error)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).map_err(io_error)?;
        buf.extend_from_slice(&chunk[..n]);
        let parsed = http::parse_response(&buf, n == 0).map_err(|source| ClientError::NotHttp {
            addr: addr.to_owned(),
            source,
        })?;
        if let Parsed::Complete(response, _) = parsed {
            return Ok(response);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_one_test(token: Option<&str>, exchange: impl FnOnce(&str)) {
        let server = HttpServer::bind("127.0.0.1:0".parse().unwrap(), token.map(str::to_owned))
            .unwrap()
            .public(&["/"]);
        let addr = server.local_addr().to_string();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                server.serve(&stop, &|request: &Request| {
                    Response::json(200, &serde_json::json!({ "path": request.path, "body": String::from_utf8_lossy(&request.body) }))
                });
            });
            exchange(&addr);
            stop.store(true, Ordering::Release);
        });
    }

    #[test]
    fn a_token_is_needed_beyond_loopback_and_checked_on_every_request_but_the_public_page() {
        assert!(matches!(
            HttpServer::bind("0.0.0.0:0".parse().unwrap(), None),
            Err(HttpServerError::NeedsToken(_))
        ));
        let token = "0123456789abcdefXYZ";
        serve_one_test(Some(token), |addr| {
            let refused = request(addr, "GET", "/api/v1/stats", None, None).unwrap();
            assert_eq!(refused.status, 401);
            assert!(refused
                .headers
                .iter()
                .any(|(n, v)| n == "www-authenticate" && v.starts_with("Bearer")));
            let wrong = request(
                addr,
                "GET",
                "/api/v1/stats",
                Some("0123456789abcdefXYz"),
                None,
            );
            assert_eq!(wrong.unwrap().status, 401);
            let page = request(addr, "GET", "/", None, None).unwrap();
            assert_eq!(page.status, 200);
            let put = request(addr, "PUT", "/x", Some(token), Some(b"{\"a\":1}")).unwrap();
            assert_eq!(put.status, 200);
            let body: serde_json::Value = serde_json::from_slice(&put.body).unwrap();
            assert_eq!(body["path"], "/x");
            assert_eq!(body["body"], "{\"a\":1}");
        });
    }

    #[test]
    fn a_malformed_request_gets_its_status_and_the_server_goes_on() {
        serve_one_test(None, |addr| {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream
                .write_all(b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 501 "), "{answer}");
            assert_eq!(request(addr, "GET", "/", None, None).unwrap().status, 200);
        });
    }

    #[test]
    fn changes_come_as_json_and_without_a_token_only_loopback_names_are_served() {
        serve_one_test(None, |addr| {
            let port = addr.rsplit_once(':').unwrap().1;
            let exchange = |head: String| {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.write_all(head.as_bytes()).unwrap();
                let mut answer = String::new();
                stream.read_to_string(&mut answer).unwrap();
                answer
            };
            // A form or plain text: what a page of another site can send without asking.
            let form = exchange(format!(
                "POST /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n\
                 Content-Length: 2\r\n\r\n{{}}"
            ));
            assert!(form.starts_with("HTTP/1.1 415 "), "{form}");
            let json = exchange(format!(
                "PUT /x HTTP/1.1\r\nHost: localhost:{port}\r\n\
                 Content-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{{}}"
            ));
            assert!(json.starts_with("HTTP/1.1 200 "), "{json}");
            // DNS rebinding: a name of another site that resolves here.
            let rebound = exchange(format!(
                "GET /x HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n"
            ));
            assert!(rebound.starts_with("HTTP/1.1 403 "), "{rebound}");
            let ipv6 = exchange(format!("GET /x HTTP/1.1\r\nHost: [::1]:{port}\r\n\r\n"));
            assert!(ipv6.starts_with("HTTP/1.1 200 "), "{ipv6}");
        });
        assert!(host_is_loopback("127.0.0.1"));
        assert!(host_is_loopback("127.0.0.1:9000"));
        assert!(host_is_loopback("[::1]:8080"));
        assert!(host_is_loopback("LOCALHOST:8080"));
        assert!(!host_is_loopback("198.18.0.1:8080"));
        assert!(!host_is_loopback("localhost.evil.example:8080"));
    }

    #[test]
    fn tokens_too_short_or_with_spaces_are_refused() {
        let dir = std::env::temp_dir().join(format!("pathlab-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        for (text, ok) in [
            ("short\n", false),
            ("0123456789abcdef\n", true),
            ("0123456789 abcdef\n", false),
        ] {
            std::fs::write(&file, text).unwrap();
            assert_eq!(read_token(&file).is_ok(), ok, "{text:?}");
        }
        assert!(read_token(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
