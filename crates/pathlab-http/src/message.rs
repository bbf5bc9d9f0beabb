//! The little HTTP/1.1 that pathlab's control addresses speak (`emulate --control`,
//! `--metrics`): requests with a `Content-Length` body, one response per connection.
//!
//! Sans-IO: [`parse_request`] reads what has arrived so far and says whether a whole
//! request is there; [`Response::to_bytes`] is what to write back; [`parse_response`] is the
//! client's half. Limits keep a hostile peer from making the server hold much: a head of
//! at most [`MAX_HEAD`] bytes and a body of at most [`MAX_BODY`]. Chunked bodies are
//! refused (501): every client sends a length for a spec.

use std::fmt::Write as _;

/// Largest request or response head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest body taken.
pub const MAX_BODY: usize = 256 * 1024;

/// A whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// What follows `?`, raw (empty without one).
    pub query: String,
    /// Headers in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Who sent it (`ADDR:PORT`), filled in by the server for its log.
    pub peer: Option<String>,
}

impl Request {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The token of an `Authorization: Bearer TOKEN` header.
    pub fn bearer(&self) -> Option<&str> {
        let value = self.header("authorization")?;
        let (scheme, token) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    }

    /// Whether the client waits for `100 Continue` before sending the body.
    pub fn expects_continue(&self) -> bool {
        self.header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// How far a request has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    /// More bytes are needed. `head`: the head is complete (its request is known, the body
    /// is still coming), for a `100 Continue`.
    Incomplete {
        /// The head alone, once it is complete.
        head: Option<T>,
    },
    /// A whole message and the bytes it took.
    Complete(T, usize),
}

/// Why a request cannot be served; each maps to a status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The head is longer than [`MAX_HEAD`].
    #[error("request head over {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The body is longer than [`MAX_BODY`].
    #[error("body over {MAX_BODY} bytes")]
    BodyTooLarge,
    /// Not HTTP/1.x as written.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// Valid but not served (chunked bodies).
    #[error("not implemented: {0}")]
    Unsupported(String),
}

impl HttpError {
    /// The status that answers it.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::HeadTooLarge => 431,
            HttpError::BodyTooLarge => 413,
            HttpError::Malformed(_) => 400,
            HttpError::Unsupported(_) => 501,
        }
    }
}

/// The head's end and its lines, once `\r\n\r\n` arrived.
fn head(buf: &[u8]) -> Result<Option<(usize, Vec<&str>)>, HttpError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err(HttpError::HeadTooLarge);
        }
        return Ok(None);
    };
    if end > MAX_HEAD {
        return Err(HttpError::HeadTooLarge);
    }
    let text = std::str::from_utf8(&buf[..end])
        .map_err(|_| HttpError::Malformed("head is not UTF-8".into()))?;
    Ok(Some((end + 4, text.split("\r\n").collect())))
}

fn headers(lines: &[&str]) -> Result<Vec<(String, String)>, HttpError> {
    lines
        .iter()
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| HttpError::Malformed(format!("header line {line:?}")))?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(HttpError::Malformed(format!("header name {name:?}")));
            }
            Ok((name.to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect()
}

/// The body's length from the headers (0 without one).
fn body_length(headers: &[(String, String)], most: usize) -> Result<usize, HttpError> {
    if header(headers, "transfer-encoding").is_some() {
        return Err(HttpError::Unsupported(
            "Transfer-Encoding; send a Content-Length".into(),
        ));
    }
    let lengths: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    match lengths.as_slice() {
        [] => Ok(0),
        [one] => {
            let length: usize = one
                .parse()
                .map_err(|_| HttpError::Malformed(format!("Content-Length {one:?}")))?;
            if length > most {
                return Err(HttpError::BodyTooLarge);
            }
            Ok(length)
        }
        _ => Err(HttpError::Malformed("Content-Length given twice".into())),
    }
}

/// Reads a request from what arrived so far.
pub fn parse_request(buf: &[u8]) -> Result<Parsed<Request>, HttpError> {
    let Some((head_len, lines)) = head(buf)? else {
        return Ok(Parsed::Incomplete { head: None });
    };
    let (request_line, header_lines) = lines.split_first().expect("split gives one");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed(format!(
            "request line {request_line:?}"
        )));
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(HttpError::Malformed(format!("version {version:?}")));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HttpError::Malformed(format!("method {method:?}")));
    }
    if !target.starts_with('/') {
        return Err(HttpError::Malformed(format!("target {target:?}")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let headers = headers(header_lines)?;
    let length = body_length(&headers, MAX_BODY)?;
    let mut request = Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body: Vec::new(),
        peer: None,
    };
    if buf.len() < head_len + length {
        return Ok(Parsed::Incomplete {
            head: Some(request),
        });
    }
    request.body = buf[head_len..head_len + length].to_vec();
    Ok(Parsed::Complete(request, head_len + length))
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Length` and `Connection`, which [`Response::to_bytes`]
    /// adds.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `body` of type `content_type`.
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// A JSON body.
    pub fn json(status: u16, body: &impl serde::Serialize) -> Response {
        let mut bytes = serde_json::to_vec_pretty(body).expect("replies serialize");
        bytes.push(b'\n');
        Response::new(status, "application/json", bytes)
    }

    /// `{"error": message}` with status `status`.
    pub fn error(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error": message }))
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The bytes to write: status line, headers, length, `Connection: close`, body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        let _ = write!(
            out,
            "Content-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n",
            self.body.len()
        );
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// A response read back by a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientResponse {
    /// The status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl ClientResponse {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// Reads a response from what arrived so far; `closed`: the server closed the
/// connection, so a response without a length ends here.
pub fn parse_response(buf: &[u8], closed: bool) -> Result<Parsed<ClientResponse>, HttpError> {
    parse_response_within(buf, closed, MAX_BODY)
}

/// [`parse_response`] for a body of at most `most` bytes (a file the client asked for);
/// longer is [`HttpError::BodyTooLarge`], also without a length.
pub fn parse_response_within(
    buf: &[u8],
    closed: bool,
    most: usize,
) -> Result<Parsed<ClientResponse>, HttpError> {
    let Some(head) = parse_response_head(buf, most)? else {
        if closed {
            return Err(HttpError::Malformed("connection closed mid-head".into()));
        }
        return Ok(Parsed::Incomplete { head: None });
    };
    let head_len = head.head_len;
    let length = match head.length {
        Some(length) => Some(length),
        None if buf.len() - head_len > most => return Err(HttpError::BodyTooLarge),
        None if closed => Some(buf.len() - head_len),
        None => None,
    };
    match length {
        Some(length) if buf.len() >= head_len + length => Ok(Parsed::Complete(
            ClientResponse {
                status: head.status,
                headers: head.headers,
                body: buf[head_len..head_len + length].to_vec(),
            },
            head_len + length,
        )),
        Some(_) if closed => Err(HttpError::Malformed("connection closed mid-body".into())),
        _ => Ok(Parsed::Incomplete { head: None }),
    }
}

/// A response's head, read before its body (which a client may stream elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The head's length in bytes, its blank line included: the body starts there.
    pub head_len: usize,
    /// The body's length from `Content-Length` (at most the `most` asked for), or `None`
    /// without one: the body then ends when the connection does.
    pub length: Option<usize>,
}

/// The response head in what arrived so far, `None` until it is whole; a body announced
/// longer than `most` bytes is [`HttpError::BodyTooLarge`].
pub fn parse_response_head(buf: &[u8], most: usize) -> Result<Option<ResponseHead>, HttpError> {
    let Some((head_len, lines)) = head(buf)? else {
        return Ok(None);
    };
    let (status_line, header_lines) = lines.split_first().expect("split gives one");
    let mut parts = status_line.splitn(3, ' ');
    let (Some(version), Some(status)) = (parts.next(), parts.next()) else {
        return Err(HttpError::Malformed(format!("status line {status_line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed(format!("status line {status_line:?}")));
    }
    let status: u16 = status
        .parse()
        .map_err(|_| HttpError::Malformed(format!("status {status:?}")))?;
    let headers = headers(header_lines)?;
    let length = match header(&headers, "content-length") {
        Some(_) => Some(body_length(&headers, most)?),
        None => None,
    };
    Ok(Some(ResponseHead {
        status,
        headers,
        head_len,
        length,
    }))
}

/// The reason phrase of the statuses pathlab sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Whether two tokens are equal, in time that depends only on their lengths (a peer
/// guessing the token learns nothing from how long the refusal took).
pub fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_complete_only_with_its_whole_body() {
        let text = b"PUT /api/v1/spec?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\
                     Authorization: Bearer s3cret\r\nExpect: 100-continue\r\n\r\nhello";
        for cut in 0..text.len() {
            match parse_request(&text[..cut]).unwrap() {
                Parsed::Incomplete { head } => {
                    // The head is known exactly once its blank line arrived.
                    let head_end = text.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    assert_eq!(head.is_some(), cut >= head_end, "cut {cut}");
                }
                Parsed::Complete(..) => panic!("complete at {cut}"),
            }
        }
        let Parsed::Complete(request, used) = parse_request(text).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(used, text.len());
        assert_eq!(request.method, "PUT");
        assert_eq!(request.path, "/api/v1/spec");
        assert_eq!(request.query, "x=1");
        assert_eq!(request.body, b"hello");
        assert_eq!(request.header("HOST"), Some("a"));
        assert_eq!(request.bearer(), Some("s3cret"));
        assert!(request.expects_continue());
    }

    #[test]
    fn bad_requests_get_the_status_that_names_their_fault() {
        let cases: &[(&[u8], u16)] = &[
            (b"GET / HTTP/1.1\r\nbad header\r\n\r\n", 400),
            (b"GET /  HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/2\r\n\r\n", 400),
            (b"get / HTTP/1.1\r\n\r\n", 400),
            (b"GET x HTTP/1.1\r\n\r\n", 400),
            (b"PUT / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
            (
                b"PUT / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                400,
            ),
            (b"PUT / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413),
            (b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        ];
        for (text, status) in cases {
            let error = parse_request(text).expect_err(&String::from_utf8_lossy(text));
            assert_eq!(error.status(), *status, "{}", String::from_utf8_lossy(text));
        }
        // A head that never ends is refused once it passes the limit, not held forever.
        let endless = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(parse_request(&endless), Err(HttpError::HeadTooLarge));
        assert_eq!(
            parse_request(&endless[..MAX_HEAD]),
            Ok(Parsed::Incomplete { head: None })
        );
    }

    #[test]
    fn a_response_reads_back_as_written() {
        let response = Response::error(400, "bad spec: 'rate' needs a value")
            .with_header("WWW-Authenticate", "Bearer");
        let bytes = response.to_bytes();
        for cut in 0..bytes.len() {
            assert!(matches!(
                parse_response(&bytes[..cut], false),
                Ok(Parsed::Incomplete { .. })
            ));
        }
        let Parsed::Complete(read, used) = parse_response(&bytes, false).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(used, bytes.len());
        assert_eq!(read.status, 400);
        let body: serde_json::Value = serde_json::from_slice(&read.body).unwrap();
        assert_eq!(body["error"], "bad spec: 'rate' needs a value");
        assert!(String::from_utf8_lossy(&bytes).starts_with("HTTP/1.1 400 Bad Request\r\n"));
        // Without a length, the body ends where the server closed.
        let bare = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert!(matches!(
            parse_response(bare, false),
            Ok(Parsed::Incomplete { .. })
        ));
        let Parsed::Complete(read, _) = parse_response(bare, true).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(read.body, b"all of it");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(tokens_equal(b"abc", b"abc"));
        assert!(!tokens_equal(b"abc", b"abd"));
        assert!(!tokens_equal(b"abc", b"abcd"));
        assert!(!tokens_equal(b"", b"a"));
    }
}
