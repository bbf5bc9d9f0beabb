//! The HTTP edge of the control and metrics addresses: a listener whose connections each
//! get one request and one response (`pathlab_http` reads and writes them), a
//! bearer token checked on every request, and the client that `emulate set --remote` uses.
//!
//! Served from a thread of its own, with a thread per connection (at most
//! [`MAX_CONNECTIONS`] at once, [`MAX_CONNECTIONS_PER_SOURCE`] of them from one source: the
//! rest get 503 with `Retry-After`) and a 5 s limit to send a request, so a slow or hostile
//! peer holds one thread for 5 s at most, never the forwarding, and one source cannot take
//! every slot. When every slot is taken, a new connection takes the slot of the oldest one
//! that has not sent its whole request yet (that one is closed): idle connections from a
//! few sources cannot keep a collector, whose request comes at once, from being served.
//! With [`HttpServer::tls`] the address speaks TLS only, the handshake within the 5 s.
//!
//! Who may do what: a request that changes anything (any method but GET) needs the token,
//! from anywhere, loopback included; without a token the address takes no change at all.
//! A GET needs it too, but for the paths declared [`HttpServer::public`] (a page that
//! holds no data) and, where [`HttpServer::reads_open_on_loopback`] says so, for a peer on
//! loopback. Every answer carries headers that forbid framing it into another site's page
//! and guessing its type.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::message::{self as http, Parsed, Request, Response};
use crate::tls::Stream;

pub use crate::client::{request, request_within, ClientError};

use pathlab_os::files::FileError;
use pathlab_os::sys;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections served at once from one source (an IPv4 address, an IPv6 /64): a fraction
/// of [`MAX_CONNECTIONS`], so one peer cannot lock the others out, and more than a browser
/// opens to one site (6).
pub const MAX_CONNECTIONS_PER_SOURCE: usize = 8;
/// How long a peer has to send its whole request.
const REQUEST_TIME: Duration = Duration::from_secs(5);
/// The shortest token taken: 16 characters (a token from `head -c 24 /dev/urandom |
/// base64` has 32).
pub const MIN_TOKEN: usize = 16;

/// The headers every answer carries: no other site may show it in a frame (clickjacking
/// the page's buttons), old browsers included (`X-Frame-Options`), and no browser may take
/// a JSON answer for a script or a page (`nosniff`).
const GUARD_HEADERS: [(&str, &str); 3] = [
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
];

/// Why an address cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum HttpServerError {
    /// Not loopback, and no token.
    #[error(
        "{0} is reachable from other machines: give a token with --control-token FILE (or \
         serve on 127.0.0.1 or [::1])"
    )]
    NeedsToken(SocketAddr),
    /// The token file cannot be read, or is open to other users.
    #[error("token file: {0}")]
    TokenFile(FileError),
    /// The token file holds no usable token.
    #[error("token file {path}: {problem}")]
    Token {
        /// The file.
        path: String,
        /// What is wrong.
        problem: TokenProblem,
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

/// Why a text is no bearer token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenProblem {
    /// The bytes are not UTF-8.
    #[error("it is not text")]
    NotText,
    /// Fewer than [`MIN_TOKEN`] characters.
    #[error(
        "the token is {len} characters; use at least {MIN_TOKEN} (e.g. (umask 077; head -c 24 \
         /dev/urandom | base64 > FILE))"
    )]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// Spaces, control characters or bytes beyond ASCII.
    #[error("the token has spaces or characters outside printable ASCII")]
    NotPrintable,
}

/// The environment variable `pathlab node` reads its control token from when given no
/// `--control-token` file (how KNE hands it over); a lab's programs never inherit it.
pub const TOKEN_ENV: &str = "PATHLAB_CONTROL_TOKEN";

/// The bearer token in `text` (a token file's contents, an environment variable's value):
/// its first line, trimmed, which must be at least [`MIN_TOKEN`] printable ASCII
/// characters without spaces. The one check of every token pathlab takes.
pub fn token_from_text(text: &str) -> Result<String, TokenProblem> {
    let token = text.lines().next().unwrap_or("").trim();
    if token.len() < MIN_TOKEN {
        return Err(TokenProblem::TooShort { len: token.len() });
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenProblem::NotPrintable);
    }
    Ok(token.to_owned())
}

/// Reads a bearer token from `path`: [`token_from_text`] of a file only its owner may read
/// ([`pathlab_os::files::read_secret`]).
pub fn read_token(path: &Path) -> Result<String, HttpServerError> {
    let fail = |problem| HttpServerError::Token {
        path: path.display().to_string(),
        problem,
    };
    let bytes = pathlab_os::files::read_secret(path).map_err(HttpServerError::TokenFile)?;
    let text = String::from_utf8(bytes).map_err(|_| fail(TokenProblem::NotText))?;
    token_from_text(&text).map_err(fail)
}

/// A new bearer token: 128 bits from the kernel's random bytes, as 32 hex digits (what
/// `--control` makes when given no token file, and `pathlab lab export` writes).
pub fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    sys::random_bytes(&mut bytes)?;
    Ok(pathlab_core::format::hex(&bytes))
}

/// A listening control or metrics address.
#[derive(Debug)]
pub struct HttpServer {
    listener: TcpListener,
    addr: SocketAddr,
    token: Option<String>,
    /// Paths served without the token (a page that holds no data and asks for it).
    public: Vec<&'static str>,
    /// Whether a peer on loopback reads (GET) without the token.
    loopback_reads: bool,
    /// TLS with this certificate; `None`: in the clear.
    tls: Option<Arc<rustls::ServerConfig>>,
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
            loopback_reads: false,
            tls: None,
        })
    }

    /// Listens on `addr` with the token in `token_file` ([`read_token`]) if one is given:
    /// how a `--metrics` address with its `--metrics-token` is bound. A token file that
    /// will not do is said before anything listens.
    pub fn bind_with_token_file(
        addr: SocketAddr,
        token_file: Option<&Path>,
    ) -> Result<HttpServer, HttpServerError> {
        let token = token_file.map(read_token).transpose()?;
        HttpServer::bind(addr, token)
    }

    /// Serves `paths` (GET only) without the token.
    pub fn public(mut self, paths: &[&'static str]) -> HttpServer {
        self.public.extend_from_slice(paths);
        self
    }

    /// Serves every GET from a peer on loopback without the token (a user of the machine
    /// reads stats and metrics as `emulate stats` would); changes still need it. Such
    /// requests must name a loopback host (see [`HttpServer::refuse_rebound`]).
    pub fn reads_open_on_loopback(mut self) -> HttpServer {
        self.loopback_reads = true;
        self
    }

    /// Speaks TLS only, proving who it is with `config`'s certificate
    /// ([`crate::tls::server_config`]).
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> HttpServer {
        self.tls = Some(config);
        self
    }

    /// Whether it speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves requests with `handler` until `stop` is set (looked at every 100 ms). Each
    /// request is checked for the token first: without it, 401.
    pub fn serve(&self, stop: &AtomicBool, handler: &(dyn Fn(&Request) -> Response + Sync)) {
        let slots = Mutex::new(Slots::default());
        let slots = &slots;
        let lock = || slots.lock().unwrap_or_else(PoisonError::into_inner);
        std::thread::scope(|scope| {
            while !stop.load(Ordering::Acquire) {
                let mut ready = [false];
                let _ = sys::poll_readable(
                    &[self.listener.as_fd()],
                    Some(Duration::from_millis(100)),
                    &mut ready,
                );
                while let Ok((stream, peer)) = self.listener.accept() {
                    let source = pathlab_core::wire::source_prefix(peer.ip());
                    let closer = stream.try_clone().ok();
                    let taken = lock().take(source, closer);
                    let ticket = match taken {
                        Ok(ticket) => ticket,
                        Err(refusal) => {
                            refuse_at_once(&stream, refusal);
                            continue;
                        }
                    };
                    scope.spawn(move || {
                        let _ = self.answer(stream, peer, handler, &|| lock().answering(ticket));
                        lock().give_back(ticket);
                    });
                }
            }
        });
    }

    /// Reads the request on `stream` (`asked` is told once it is whole), answers it.
    fn answer(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        handler: &(dyn Fn(&Request) -> Response + Sync),
        asked: &dyn Fn(),
    ) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        let deadline = std::time::Instant::now() + REQUEST_TIME;
        stream.set_read_timeout(Some(REQUEST_TIME))?;
        stream.set_write_timeout(Some(REQUEST_TIME))?;
        let mut stream = match &self.tls {
            None => Stream::Plain(stream),
            Some(config) => {
                let connection =
                    rustls::ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(connection, stream)))
            }
        };
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 8192];
        let mut continued = false;
        let response = loop {
            match http::parse_request(&buf) {
                Ok(Parsed::Complete(mut request, _)) => {
                    asked();
                    request.peer = Some(peer.to_string());
                    break self.authorized(&request, peer.ip(), handler);
                }
                Ok(Parsed::Incomplete { head }) => {
                    if let Some(head) = head {
                        if !continued && head.expects_continue() {
                            continued = true;
                            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
                            stream.flush()?;
                        }
                    }
                }
                Err(error) => break Response::error(error.status(), &error.to_string()),
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break Response::error(408, "the request took over 5 s to arrive");
            }
            stream.tcp().set_read_timeout(Some(left))?;
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(e),
                Err(_) => break Response::error(408, "the request took over 5 s to arrive"),
            }
        };
        stream.tcp().set_write_timeout(Some(REQUEST_TIME))?;
        stream.write_all(&guarded(response).to_bytes())?;
        stream.finish()
    }

    fn authorized(
        &self,
        request: &Request,
        peer: IpAddr,
        handler: &(dyn Fn(&Request) -> Response + Sync),
    ) -> Response {
        if let Some(refused) = refuse_non_json(request) {
            return refused;
        }
        let with_token = self.token.as_ref().is_some_and(|token| {
            request
                .bearer()
                .is_some_and(|given| http::tokens_equal(given.as_bytes(), token.as_bytes()))
        });
        if with_token {
            return handler(request);
        }
        let reading = request.method == "GET";
        if reading && self.public.contains(&request.path.as_str()) {
            return handler(request);
        }
        if !reading {
            return Response::error(
                401,
                if self.token.is_some() {
                    "a change needs 'Authorization: Bearer TOKEN', from loopback too: the \
                     token this address was started with (printed at start, or its \
                     --control-token file)"
                } else {
                    "this address was started without a token and takes no changes"
                },
            )
            .with_header("WWW-Authenticate", "Bearer realm=\"pathlab\"");
        }
        let open = self.token.is_none() || (self.loopback_reads && is_loopback(peer));
        if !open {
            return Response::error(
                401,
                "this address needs 'Authorization: Bearer TOKEN', the token of the file \
                 it was started with",
            )
            .with_header("WWW-Authenticate", "Bearer realm=\"pathlab\"");
        }
        if let Some(refused) = refuse_rebound(request) {
            return refused;
        }
        handler(request)
    }
}

/// Answers `refusal` on a connection that gets no thread, without waiting for anything:
/// one write (the socket is new, its send buffer empty; a peer that does not read gets
/// nothing more), then what the peer sent so far is read and dropped, since closing a
/// socket with unread bytes resets it and the peer could lose the answer.
fn refuse_at_once(stream: &TcpStream, refusal: Response) {
    let _ = stream.set_nonblocking(true);
    let mut stream = stream;
    let _ = stream.write_all(&guarded(refusal).to_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// An answer with the [`GUARD_HEADERS`].
fn guarded(response: Response) -> Response {
    GUARD_HEADERS
        .iter()
        .fold(response, |response, (name, value)| {
            response.with_header(name, value)
        })
}

/// What keeps a web page the user visits from driving an address through their browser: a
/// body must come as JSON. A browser sends a form or plain text to any site without
/// asking first, but asks (a CORS preflight, which is refused here) before sending JSON
/// elsewhere.
fn refuse_non_json(request: &Request) -> Option<Response> {
    if request.body.is_empty() {
        return None;
    }
    let json = request.header("content-type").is_some_and(|value| {
        value
            .split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    (!json).then(|| {
        Response::error(
            415,
            "send the body as JSON, with 'Content-Type: application/json'",
        )
    })
}

/// What keeps another site from reading what is served without a token: only loopback
/// names are taken in `Host`. A site whose name resolves to 127.0.0.1 (DNS rebinding)
/// would otherwise be same-origin with this address and read it.
fn refuse_rebound(request: &Request) -> Option<Response> {
    let host = request.header("host")?;
    (!host_is_loopback(host)).then(|| {
        Response::error(
            403,
            &format!(
                "'Host: {host}' is not this loopback address; without a token only \
                 127.0.0.1, [::1] and localhost are served"
            ),
        )
    })
}

/// How long a peer refused for want of a slot is asked to wait (`Retry-After`, s).
pub const RETRY_AFTER_SECS: u64 = 1;

/// A slot [`Slots::take`] gave: which, and to which source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ticket {
    id: u64,
    source: IpAddr,
}

/// The connections being served: their number, how many each source holds, and those
/// that have not sent their whole request yet (oldest first), each with a handle that
/// closes it.
#[derive(Debug, Default)]
struct Slots {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
    waiting: std::collections::VecDeque<(Ticket, Option<TcpStream>)>,
    /// Connections closed for another, whose slot went to it.
    closed: std::collections::HashSet<u64>,
    next_id: u64,
}

impl Slots {
    /// Takes a slot for `source` (`closer`: a handle on its connection), or says why not
    /// (503, with `Retry-After`): [`MAX_CONNECTIONS_PER_SOURCE`] are served from this
    /// source already, or [`MAX_CONNECTIONS`] are served and all have sent their request.
    /// When all are taken, the oldest connection still waiting for its request is closed
    /// and its slot given to this one.
    fn take(&mut self, source: IpAddr, closer: Option<TcpStream>) -> Result<Ticket, Response> {
        let retry = |message: &str| {
            Response::error(503, message).with_header("Retry-After", &RETRY_AFTER_SECS.to_string())
        };
        if self.by_source.get(&source).copied().unwrap_or(0) >= MAX_CONNECTIONS_PER_SOURCE {
            return Err(retry(&format!(
                "too many connections from your address at once (at most \
                 {MAX_CONNECTIONS_PER_SOURCE})"
            )));
        }
        if self.total >= MAX_CONNECTIONS {
            let Some((oldest, handle)) = self.waiting.pop_front() else {
                return Err(retry("too many connections at once"));
            };
            if let Some(handle) = handle {
                let _ = handle.shutdown(std::net::Shutdown::Both);
            }
            self.closed.insert(oldest.id);
            self.release(oldest.source);
        }
        let ticket = Ticket {
            id: self.next_id,
            source,
        };
        self.next_id += 1;
        *self.by_source.entry(source).or_default() += 1;
        self.total += 1;
        self.waiting.push_back((ticket, closer));
        Ok(ticket)
    }

    /// `ticket`'s request is whole: its connection is no longer one to close for another.
    fn answering(&mut self, ticket: Ticket) {
        self.waiting.retain(|(t, _)| *t != ticket);
    }

    /// Gives back the slot of `ticket`, unless it was given to another already.
    fn give_back(&mut self, ticket: Ticket) {
        if self.closed.remove(&ticket.id) {
            return;
        }
        self.waiting.retain(|(t, _)| *t != ticket);
        self.release(ticket.source);
    }

    fn release(&mut self, source: IpAddr) {
        if let Some(held) = self.by_source.get_mut(&source) {
            *held -= 1;
            if *held == 0 {
                self.by_source.remove(&source);
            }
            self.total -= 1;
        }
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

/// Whether `ip` is a loopback address (an IPv4-mapped IPv6 one included).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stops the server however the exchange ends, a failed assertion included.
    struct StopOnDrop<'a>(&'a AtomicBool);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    fn serve_one_test(server: HttpServer, exchange: impl FnOnce(&str)) {
        let server = server.public(&["/"]);
        let addr = server.local_addr().to_string();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                server.serve(&stop, &|request: &Request| {
                    Response::json(200, &serde_json::json!({ "path": request.path, "body": String::from_utf8_lossy(&request.body) }))
                });
            });
            let _stop = StopOnDrop(&stop);
            exchange(&addr);
        });
    }

    fn loopback(token: Option<&str>) -> HttpServer {
        HttpServer::bind("127.0.0.1:0".parse().unwrap(), token.map(str::to_owned)).unwrap()
    }

    /// Sends `head` (a whole request) and reads the whole answer.
    fn exchange(addr: &str, head: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        if let Err(error) = stream.read_to_string(&mut answer) {
            answer = format!("{answer}(then {error})");
        }
        answer
    }

    #[test]
    fn a_token_is_needed_beyond_loopback_and_checked_on_every_request_but_the_public_page() {
        assert!(matches!(
            HttpServer::bind("0.0.0.0:0".parse().unwrap(), None),
            Err(HttpServerError::NeedsToken(_))
        ));
        let token = "0123456789abcdefXYZ";
        serve_one_test(loopback(Some(token)), |addr| {
            let refused = request(addr, "GET", "/api/v1/stats", None, None).unwrap();
            assert_eq!(refused.status, 401);
            assert!(refused
                .header("www-authenticate")
                .is_some_and(|v| v.starts_with("Bearer")));
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
    fn every_answer_forbids_framing_and_sniffing() {
        serve_one_test(loopback(Some("0123456789abcdefXYZ")), |addr| {
            for (method, path) in [("GET", "/"), ("GET", "/api/v1/stats"), ("PUT", "/x")] {
                let answer = request(addr, method, path, None, Some(b"{}")).unwrap();
                assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{path}");
                assert_eq!(
                    answer.header("content-security-policy"),
                    Some("frame-ancestors 'none'")
                );
                assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
            }
        });
    }

    #[test]
    fn a_malformed_request_gets_its_status_and_the_server_goes_on() {
        serve_one_test(loopback(None), |addr| {
            let answer = exchange(addr, "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
            assert!(answer.starts_with("HTTP/1.1 501 "), "{answer}");
            assert_eq!(request(addr, "GET", "/", None, None).unwrap().status, 200);
        });
    }

    #[test]
    fn changes_come_as_json_with_the_token_and_reads_without_one_name_loopback() {
        serve_one_test(loopback(None), |addr| {
            let port = addr.rsplit_once(':').unwrap().1;
            // A form or plain text: what a page of another site can send without asking.
            let form = exchange(
                addr,
                &format!(
                    "POST /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n\
                     Content-Length: 2\r\n\r\n{{}}"
                ),
            );
            assert!(form.starts_with("HTTP/1.1 415 "), "{form}");
            // Without a token the address takes no change, even from loopback.
            let json = exchange(
                addr,
                &format!(
                    "PUT /x HTTP/1.1\r\nHost: localhost:{port}\r\n\
                     Content-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{{}}"
                ),
            );
            assert!(json.starts_with("HTTP/1.1 401 "), "{json}");
            // DNS rebinding: a name of another site that resolves here.
            let rebound = exchange(
                addr,
                &format!("GET /x HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n"),
            );
            assert!(rebound.starts_with("HTTP/1.1 403 "), "{rebound}");
            let ipv6 = exchange(
                addr,
                &format!("GET /x HTTP/1.1\r\nHost: [::1]:{port}\r\n\r\n"),
            );
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
    fn with_reads_open_on_loopback_a_change_still_needs_the_token() {
        let token = "0123456789abcdefXYZ";
        serve_one_test(loopback(Some(token)).reads_open_on_loopback(), |addr| {
            let port = addr.rsplit_once(':').unwrap().1;
            assert_eq!(
                request(addr, "GET", "/stats", None, None).unwrap().status,
                200
            );
            let put = request(addr, "PUT", "/spec", None, Some(b"{}")).unwrap();
            assert_eq!(put.status, 401);
            let delete = request(addr, "DELETE", "/recording", None, None).unwrap();
            assert_eq!(delete.status, 401);
            let put = request(addr, "PUT", "/spec", Some(token), Some(b"{}")).unwrap();
            assert_eq!(put.status, 200);
            // What is open without the token is not open to a rebinding site.
            let rebound = exchange(
                addr,
                &format!("GET /stats HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n"),
            );
            assert!(rebound.starts_with("HTTP/1.1 403 "), "{rebound}");
        });
    }

    #[test]
    fn one_source_cannot_take_every_connection() {
        serve_one_test(loopback(None), |addr| {
            // Connections that never send a request hold their slots for 5 s.
            let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS_PER_SOURCE)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect();
            // The server takes them in its own time: wait until it refuses.
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            let refused = loop {
                let answer = exchange(addr, "GET /x HTTP/1.1\r\n\r\n");
                if answer.starts_with("HTTP/1.1 503 ") {
                    break answer;
                }
                assert!(std::time::Instant::now() < deadline, "{answer}");
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(refused.contains("from your address"), "{refused}");
            drop(idle);
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            while request(addr, "GET", "/x", None, None).unwrap().status != 200 {
                assert!(std::time::Instant::now() < deadline, "slots given back");
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }

    #[test]
    fn slots_are_bounded_per_source_and_overall_and_given_back() {
        let mut slots = Slots::default();
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let mut held: Vec<Ticket> = (0..MAX_CONNECTIONS_PER_SOURCE)
            .map(|_| slots.take(a, None).unwrap())
            .collect();
        let refused = slots.take(a, None).unwrap_err();
        assert_eq!(refused.status, 503);
        assert!(refused
            .headers
            .iter()
            .any(|(name, value)| name == "Retry-After" && value == "1"));
        slots.give_back(held.pop().unwrap());
        held.push(slots.take(a, None).unwrap());
        let mut sources = (1..=255u8).map(|i| IpAddr::from([198, 18, 1, i]));
        let mut others = Vec::new();
        while slots.total < MAX_CONNECTIONS {
            others.push(slots.take(sources.next().unwrap(), None).unwrap());
        }
        // Full: the newest takes the slot of the oldest still waiting for its request (one
        // of a's), whose giving back is then a no-op.
        let newest = slots.take(sources.next().unwrap(), None).unwrap();
        assert_eq!(slots.total, MAX_CONNECTIONS);
        assert_eq!(slots.by_source[&a], MAX_CONNECTIONS_PER_SOURCE - 1);
        let closed = held.remove(0);
        slots.give_back(closed);
        assert_eq!(slots.total, MAX_CONNECTIONS);
        // Every one answering: nothing to close, the next is refused until one ends.
        for ticket in held.iter().chain(&others).chain([&newest]) {
            slots.answering(*ticket);
        }
        assert_eq!(
            slots
                .take(sources.next().unwrap(), None)
                .unwrap_err()
                .status,
            503,
            "overall bound"
        );
        for ticket in held {
            slots.give_back(ticket);
        }
        assert!(!slots.by_source.contains_key(&a));
        assert_eq!(
            slots.total,
            MAX_CONNECTIONS - (MAX_CONNECTIONS_PER_SOURCE - 1)
        );
    }

    /// N6 (issue 39): eight idle connections from each of four addresses filled every slot
    /// and the next client, a collector, got 503. It is served now: its connection takes
    /// the slot of the oldest idle one.
    #[test]
    fn idle_connections_filling_every_slot_do_not_keep_a_client_out() {
        let token = "0123456789abcdefXYZ";
        serve_one_test(loopback(Some(token)), |addr| {
            let server: SocketAddr = addr.parse().unwrap();
            let idle: Vec<TcpStream> = (2..6u8)
                .flat_map(|k| {
                    (0..MAX_CONNECTIONS_PER_SOURCE).map(move |_| {
                        pathlab_os::testing::tcp_connect_from(IpAddr::from([127, 0, 0, k]), server)
                            .unwrap()
                    })
                })
                .collect();
            assert_eq!(idle.len(), MAX_CONNECTIONS);
            // The server takes them in its own time: the first of them is closed once a
            // client needs its slot.
            std::thread::sleep(Duration::from_millis(300));
            let started = std::time::Instant::now();
            let answer = request(addr, "GET", "/x", Some(token), None).unwrap();
            assert_eq!(
                answer.status,
                200,
                "{}",
                String::from_utf8_lossy(&answer.body)
            );
            assert!(started.elapsed() < Duration::from_secs(2), "served at once");
            let mut first = &idle[0];
            let mut byte = [0u8; 1];
            first
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            assert!(
                matches!(first.read(&mut byte), Ok(0) | Err(_)),
                "the oldest idle connection was closed"
            );
        });
    }

    #[test]
    fn tokens_too_short_with_spaces_or_open_to_others_are_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("pathlab-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        for (text, mode, ok) in [
            ("short\n", 0o600, false),
            ("0123456789abcdef\n", 0o600, true),
            ("0123456789 abcdef\n", 0o600, false),
            ("0123456789abcdef\n", 0o644, false),
            ("0123456789abcdef\n", 0o640, false),
        ] {
            std::fs::write(&file, text).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(read_token(&file).is_ok(), ok, "{text:?} {mode:o}");
        }
        assert!(matches!(
            read_token(&file),
            Err(HttpServerError::TokenFile(FileError::OpenToOthers { .. }))
        ));
        assert!(read_token(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_token_text_is_its_first_line_trimmed_of_16_or_more_printable_characters() {
        assert_eq!(
            token_from_text("  0123456789abcdef \nsecond line"),
            Ok("0123456789abcdef".into())
        );
        assert_eq!(
            token_from_text("0123456789abcde"),
            Err(TokenProblem::TooShort { len: 15 })
        );
        assert_eq!(token_from_text(""), Err(TokenProblem::TooShort { len: 0 }));
        for bad in [
            "0123456789 abcdef",
            "0123456789\tabcdef",
            "0123456789abcdef\u{e9}",
        ] {
            assert_eq!(
                token_from_text(bad),
                Err(TokenProblem::NotPrintable),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn new_tokens_are_128_bits_as_hex_and_differ() {
        let [a, b] = [new_token().unwrap(), new_token().unwrap()];
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(token_from_text(&a), Ok(a.clone()));
        assert_ne!(a, b);
    }
}
