//! pathlab-http: the HTTP/1.1 of pathlab's long-running commands.
//!
//! Layer: IO, above `pathlab-os`. The request reader and response writer are sans-IO
//! ([`message`]: bytes in, a parsed request or bytes out, with limits); [`server`] moves
//! them over TCP (or TLS, [`tls`]) with a token and a bound on connections, and
//! [`client`] is the one client (`--remote`, `lab collect`); [`prometheus`] writes (and strictly reads) the text exposition format, and
//! [`metrics`] is the one `/metrics` route every command serves it on. It knows nothing
//! of emulators, measurements or tunnels: each command hands it a handler or a renderer.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod message;
pub mod metrics;
pub mod prometheus;
pub mod server;
pub mod tls;

pub use client::{request, Call, ClientError};
pub use message::{
    parse_request, parse_response, reason, tokens_equal, ClientResponse, HttpError, Parsed,
    Request, Response, MAX_BODY, MAX_HEAD,
};
pub use server::{
    new_token, read_token, token_from_text, HttpServer, HttpServerError, TokenProblem,
};
pub use tls::{TlsClient, TlsError};
