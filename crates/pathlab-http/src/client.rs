//! The client of a control address: one request, one response, within an overall
//! deadline when given one (not only a timeout per read: a peer that trickles a byte
//! every few seconds is given up on when the deadline comes), over TLS when given a
//! [`TlsClient`] (the server proves its name before the request, token included, leaves),
//! with the body in memory or streamed to a writer, bounded either way.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::message::{self as http, ClientResponse, HttpError, Parsed};
use crate::tls::{Stream, TlsClient};

/// How long a connection may take to open.
const CONNECT_TIME: Duration = Duration::from_secs(5);
/// How long the peer may stay silent.
const READ_TIME: Duration = Duration::from_secs(10);

/// Why a request to a control address failed. The reason is in the message, not a
/// source as well: an error chain printed whole (`{:#}`) said it twice.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody answers.
    #[error("cannot reach {addr}: {reason}")]
    Connect {
        /// The address.
        addr: String,
        /// The error.
        reason: io::Error,
    },
    /// The peer did not prove the name it had to (no TLS, another CA's certificate,
    /// another name): nothing was sent to it.
    #[error(
        "{addr} did not prove it is '{name}' (TLS with a certificate of the lab's CA): \
         {reason}; nothing was sent to it"
    )]
    NotProven {
        /// The address.
        addr: String,
        /// The name it had to prove.
        name: String,
        /// Why not.
        reason: io::Error,
    },
    /// The exchange failed midway.
    #[error("talking to {addr}: {reason}")]
    Io {
        /// The address.
        addr: String,
        /// The error.
        reason: io::Error,
    },
    /// The deadline came before the answer was whole.
    #[error("{addr} had not answered whole by the deadline")]
    Deadline {
        /// The address.
        addr: String,
    },
    /// The answer is not HTTP.
    #[error("{addr} answered something that is not HTTP: {reason}")]
    NotHttp {
        /// The address.
        addr: String,
        /// What is wrong.
        reason: HttpError,
    },
    /// The body went beyond its bound, or could not be written where it goes.
    #[error("{addr}: the body {reason}")]
    Body {
        /// The address.
        addr: String,
        /// What happened.
        reason: String,
    },
}

/// One request: what to ask of whom, how the answer's body is kept.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `HOST:PORT`.
    pub addr: &'a str,
    /// TLS, the peer proving its name; `None`: in the clear.
    pub tls: Option<&'a TlsClient>,
    /// The method.
    pub method: &'a str,
    /// The path.
    pub path: &'a str,
    /// A bearer token to send.
    pub token: Option<&'a str>,
    /// A JSON body to send.
    pub body: Option<&'a [u8]>,
    /// When to give up, whatever the peer does; `None`: only the per-step timeouts (5 s
    /// to connect, 10 s of silence).
    pub deadline: Option<Instant>,
}

impl<'a> Call<'a> {
    /// A GET of `path` from `addr`, in the clear, no token, no deadline.
    pub fn get(addr: &'a str, path: &'a str) -> Call<'a> {
        Call {
            addr,
            tls: None,
            method: "GET",
            path,
            token: None,
            body: None,
            deadline: None,
        }
    }

    /// Sends the request and reads the answer, its body in memory (at most `most` bytes).
    pub fn send(&self, most: usize) -> Result<ClientResponse, ClientError> {
        let mut stream = self.open()?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = self.read(&mut stream, &mut chunk)?;
            buf.extend_from_slice(&chunk[..n]);
            let parsed = http::parse_response_within(&buf, n == 0, most)
                .map_err(|reason| self.not_http(reason))?;
            if let Parsed::Complete(response, _) = parsed {
                return Ok(response);
            }
        }
    }

    /// Sends the request and reads the answer; a 200's body goes to `sink` as it arrives
    /// (at most `most` bytes, refused beyond: announced longer, or longer than announced),
    /// any other status's body is in the response (bounded by [`http::MAX_BODY`]).
    pub fn send_to(&self, most: u64, sink: &mut dyn Write) -> Result<ClientResponse, ClientError> {
        let mut stream = self.open()?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16384];
        let head = loop {
            let n = self.read(&mut stream, &mut chunk)?;
            buf.extend_from_slice(&chunk[..n]);
            let most_in_memory = usize::try_from(most).unwrap_or(usize::MAX);
            if let Some(head) = http::parse_response_head(&buf, most_in_memory)
                .map_err(|reason| self.not_http(reason))?
            {
                break head;
            }
            if n == 0 {
                return Err(
                    self.not_http(HttpError::Malformed("connection closed mid-head".into()))
                );
            }
        };
        let mut response = ClientResponse {
            status: head.status,
            headers: head.headers,
            body: Vec::new(),
        };
        let limit = if head.status == 200 {
            most
        } else {
            http::MAX_BODY as u64
        };
        let body_error = |reason: String| ClientError::Body {
            addr: self.addr.to_owned(),
            reason,
        };
        let mut got = buf.split_off(head.head_len);
        let mut written: u64 = 0;
        loop {
            let wanted = head.length.map(|l| l as u64);
            if let Some(length) = wanted {
                got.truncate(
                    usize::try_from(length - written)
                        .unwrap_or(usize::MAX)
                        .min(got.len()),
                );
            }
            written += got.len() as u64;
            if written > limit {
                return Err(body_error(format!("is over {limit} bytes: refused")));
            }
            if head.status == 200 {
                sink.write_all(&got)
                    .map_err(|e| body_error(format!("could not be written: {e}")))?;
            } else {
                response.body.extend_from_slice(&got);
            }
            if wanted == Some(written) {
                return Ok(response);
            }
            let n = self.read(&mut stream, &mut chunk)?;
            if n == 0 {
                return match wanted {
                    None => Ok(response),
                    Some(_) => {
                        Err(self
                            .not_http(HttpError::Malformed("connection closed mid-body".into())))
                    }
                };
            }
            got = chunk[..n].to_vec();
        }
    }

    fn not_http(&self, reason: HttpError) -> ClientError {
        ClientError::NotHttp {
            addr: self.addr.to_owned(),
            reason,
        }
    }

    /// The time left before the deadline, at most `step`; an error once none is left.
    fn left(&self, step: Duration) -> Result<Duration, ClientError> {
        let Some(deadline) = self.deadline else {
            return Ok(step);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Deadline {
                addr: self.addr.to_owned(),
            });
        }
        Ok(left.min(step))
    }

    /// Reads what comes within the time left; 0 at the end (a TLS peer that closed without
    /// its close_notify included: the body's length says whether it was cut).
    fn read(
        &self,
        stream: &mut Stream<rustls::ClientConnection>,
        chunk: &mut [u8],
    ) -> Result<usize, ClientError> {
        loop {
            let left = self.left(READ_TIME)?;
            stream
                .tcp()
                .set_read_timeout(Some(left))
                .map_err(|reason| self.io_error(reason))?;
            match stream.read(chunk) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if is_timeout(&e) && self.deadline.is_some() => {
                    self.left(READ_TIME)?;
                    return Err(self.io_error(e));
                }
                Err(e) => return Err(self.io_error(e)),
            }
        }
    }

    fn io_error(&self, reason: io::Error) -> ClientError {
        ClientError::Io {
            addr: self.addr.to_owned(),
            reason,
        }
    }

    /// Connects (TLS: the peer proves its name first) and sends the request.
    fn open(&self) -> Result<Stream<rustls::ClientConnection>, ClientError> {
        use std::net::ToSocketAddrs as _;
        let addr = self.addr;
        let connect = |reason| ClientError::Connect {
            addr: addr.to_owned(),
            reason,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        let mut tcp = None;
        for socket_addr in addr.to_socket_addrs().map_err(connect)? {
            match TcpStream::connect_timeout(&socket_addr, self.left(CONNECT_TIME)?) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = tcp.ok_or_else(|| connect(last))?;
        tcp.set_read_timeout(Some(self.left(READ_TIME)?))
            .map_err(|reason| self.io_error(reason))?;
        tcp.set_write_timeout(Some(self.left(READ_TIME)?))
            .map_err(|reason| self.io_error(reason))?;
        let mut stream = match self.tls {
            None => Stream::Plain(tcp),
            Some(tls) => tls.connect(tcp).map_err(|reason| {
                if is_timeout(&reason) {
                    if let Err(deadline) = self.left(READ_TIME) {
                        return deadline;
                    }
                }
                ClientError::NotProven {
                    addr: addr.to_owned(),
                    name: tls.name(),
                    reason,
                }
            })?,
        };
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n",
            self.method, self.path
        );
        if let Some(token) = self.token {
            let _ = write!(head, "Authorization: Bearer {token}\r\n");
        }
        let body = self.body.unwrap_or_default();
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
        stream
            .write_all(&bytes)
            .and_then(|()| stream.flush())
            .map_err(|reason| self.io_error(reason))?;
        Ok(stream)
    }
}

/// Whether a read failed for its timeout.
fn is_timeout(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
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
    request_within(addr, method, path, token, body, http::MAX_BODY)
}

/// [`request`] for an answer of up to `most` bytes of body (a result or a file).
pub fn request_within(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    most: usize,
) -> Result<ClientResponse, ClientError> {
    Call {
        addr,
        tls: None,
        method,
        path,
        token,
        body,
        deadline: None,
    }
    .send(most)
}
